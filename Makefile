# Lunar - one top Makefile. `make` builds everything with warnings as errors,
# `make test` runs every test, `make demo` runs a single-node store.
# Folders are globbed: a new .c file in a component folder joins its library.

BUILD ?= build
PREFIX ?= /usr/local
CC ?= cc
CFLAGS ?= -O2 -g
override CFLAGS += -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
	-fPIC -D_GNU_SOURCE -MMD -MP -pthread
# CPPFLAGS, LDFLAGS and LDLIBS from the command line reach every compile and
# every link (make asan and make tsan pass their -fsanitize= in LDFLAGS).

# Every CPU builds when at most one goal is named (goals named together,
# as in `make clean all`, run one after the other); a -jN on the command
# line wins, and a sub-make shares its parent's jobs.
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS))$(word 2,$(MAKECMDGOALS)),0)
MAKEFLAGS += -j$(shell nproc)
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(patsubst $(BUILD)/%,%,$(1)))

# ---- Layers: who may include whom --------------------------------------------
# The architecture (docs/architecture.md), enforced by include paths: a file
# compiles with the interfaces of the components its layer SEES and nothing
# else, so an #include across a layer boundary does not compile
# (tests/build/test_layers.sh keeps it so). A component's own folder needs no
# flag: "x.h" is looked up next to the file that includes it.
#
#   X_SRC   the sources of layer X; a component (in COMPONENTS) archives
#           them into $(BUILD)/lib/libX.a
#   X_API   what other layers may include from X: a whole folder (-Idir), or
#           only the headers named in $(call exports,X,...), reached as
#           "X/x.h" - the component-private headers (*_int.h) stay out
#   X_SEES  the layers whose X_API X may include (besides its own)
#   X_PKGS  pkg-config packages (their --cflags when compiling X, their
#           --libs when linking a program that uses X)
#   X_LIBS  link flags for what ships no pkg-config file
#
# exports makes $(BUILD)/api/X/X/x.h a link to X/x.h and gives its -I flag.
exports = $(eval API_LINKS += $(addprefix $(BUILD)/api/$(1)/,$(2)))-I$(BUILD)/api/$(1)
API_LINKS :=

# auth/ joins once it has sources; until then $(AUTH) is empty. Then engine,
# master, proxy, tools, bench and tests see -Iauth, and the programs that use
# them link libauth.a and libsodium.
auth_SRC := $(wildcard auth/*.c)
AUTH := $(if $(auth_SRC),auth)

# Libraries, in link order (a library before those it uses).
COMPONENTS := proxy engine disk master proto etcd $(AUTH) shmlib common

# libc, and lunar.h for the public error codes (SPEC §9).
common_SRC := $(wildcard common/*.c)
common_API := -Icommon
common_SEES := shmlib

# liblunar's internals; applications see only shmlib/include.
shmlib_SRC := $(wildcard shmlib/*.c)
shmlib_API := -Ishmlib/include
shmlib_SEES := common

auth_API := -Iauth
auth_SEES := common shmlib
auth_PKGS := libsodium

proto_SRC := $(BUILD)/proto/lunar.pb-c.c $(wildcard proto/*.c)
proto_API := -Iproto -I$(BUILD)/proto
proto_SEES := etcd common shmlib $(AUTH)
proto_PKGS := libprotobuf-c

engine_SRC := $(wildcard engine/*.c)
engine_API := $(call exports,engine,engine/engine.h)
engine_SEES := common shmlib $(AUTH)

disk_SRC := $(wildcard disk/*.c)
disk_API := $(call exports,disk,disk/disk.h)
disk_SEES := common shmlib
disk_PKGS := liburing

# etcd/: the etcd v3 client (JSON gateway over libcurl) and the leader key's
# format: the masters' election, and leader discovery for every program given
# --master etcd://... A program links libcurl only when it links this layer.
etcd_SRC := $(wildcard etcd/*.c)
etcd_API := $(call exports,etcd,etcd/etcd.h etcd/leader.h)
etcd_SEES := common
etcd_PKGS := libcurl

master_SRC := $(filter-out master/main.c,$(wildcard master/*.c))
master_MAIN := master/main.c
master_API := $(call exports,master,master/master.h)
master_SEES := proto etcd common shmlib $(AUTH)
master_PKGS := libprotobuf-c
master_LIBS := -lm

# The proxy embeds the master through master.h only.
proxy_SRC := $(filter-out proxy/main.c,$(wildcard proxy/*.c))
proxy_MAIN := proxy/main.c
proxy_SEES := engine disk master proto etcd common shmlib $(AUTH)
proxy_PKGS := libprotobuf-c

# Compile-only layers: programs and tests.
# tools: lunarctl and memc-bench, applications of liblunar.
tools_SRC := $(filter-out tools/lunar-bench.c,$(wildcard tools/*.c tools/ctl/*.c))
tools_SEES := shmlib common etcd $(AUTH)
tools_LIBS := -lm
# bench: lunar-bench, whose --master mode speaks the master's RPC.
bench_SRC := tools/lunar-bench.c $(wildcard tools/bench/*.c)
bench_SEES := shmlib common proto etcd master $(AUTH)
bench_PKGS := liburing
bench_LIBS := -lm
# tests see everything, internals included (-I.: "engine/eng_int.h").
tests_SRC := $(wildcard tests/unit/*.c tests/integration/*.c tests/chaos/*.c)
tests_API := -I.
tests_SEES := $(COMPONENTS)
tests_PKGS := cmocka
# No daemon links nng: the tests do, for a real nng peer on each side of the
# wire proto/ speaks (Debian's libnng-dev ships no nng.pc: a plain -lnng).
tests_LIBS := -lnng

LAYERS := $(COMPONENTS) tools bench tests

# pkg-config, asked at most once per package and flag, when a recipe first
# needs it: mk/deps.sh may install a package after the Makefile is read.
pkg1 = $(if $(filter undefined,$(origin PKG_$(1)_$(2))),$(eval PKG_$(1)_$(2) := \
	$$(shell pkg-config --$(1) $(2))))$(PKG_$(1)_$(2))
pkg = $(foreach p,$(sort $(2)),$(call pkg1,$(1),$(p)))

# The compile flags of layer $(1); the link flags of layers $(1).
layer_flags = $(foreach s,$(1) $($(1)_SEES),$($(s)_API)) $(call pkg,cflags,$($(1)_PKGS))
link_flags = $(foreach c,$(1),$($(c)_LIBS)) $(call pkg,libs,$(foreach c,$(1),$($(c)_PKGS)))

$(foreach l,$(LAYERS),$(eval $(call obj,$($(l)_SRC) $($(l)_MAIN)): LAYER := $(l)))
$(foreach c,$(COMPONENTS),$(eval $(c)_LIB := $(BUILD)/lib/lib$(c).a))

# ---- Products ----------------------------------------------------------------
LIBLUNAR_SO := $(BUILD)/lib/liblunar.so
LIBLUNAR_SO1 := $(BUILD)/lib/liblunar.so.1
LIBLUNAR_A := $(BUILD)/lib/liblunar.a
LAYERS_TXT := $(BUILD)/layers.txt

BINS := $(BUILD)/bin/lunar-master $(BUILD)/bin/lunar-proxy $(BUILD)/bin/lunarctl \
	$(BUILD)/bin/lunar-bench
# Built and tested, not installed: bench-vs-peers.sh's memcached client.
TOOLS := $(BUILD)/bin/memc-bench
UNIT_SRC := $(wildcard tests/unit/test_*.c)
INTEG_SRC := $(wildcard tests/integration/test_*.c)
HARNESS_SRC := $(wildcard tests/integration/harness*.c)
# And one of no source of its own (below: test_crc32c_avx512).
UNIT_EMU := $(BUILD)/tests/unit/test_crc32c_avx512
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC)) $(UNIT_EMU)
INTEG_BINS := $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(INTEG_SRC))
# Long fault tests, run by `make chaos` only (built with everything).
CHAOS_SRC := $(wildcard tests/chaos/test_*.c)
CHAOS_BINS := $(patsubst tests/chaos/%.c,$(BUILD)/tests/chaos/%,$(CHAOS_SRC))
BUILD_TESTS := $(wildcard tests/build/test_*.sh)
DEPS_STAMP := $(BUILD)/.deps-ok

.SECONDARY:
.PHONY: all test unit integration chaos rdma-vm failpoints demo install clean deps asan tsan format fuzz \
	layers FORCE
all: $(BINS) $(TOOLS) $(LIBLUNAR_SO) $(LIBLUNAR_A) $(UNIT_BINS) $(INTEG_BINS) $(CHAOS_BINS) \
	$(LAYERS_TXT)

# ---- Compiling -----------------------------------------------------------------
deps: $(DEPS_STAMP)
$(DEPS_STAMP): mk/deps.sh
	$(Q)bash mk/deps.sh
	$(Q)mkdir -p $(@D) && touch $@

$(BUILD)/proto/lunar.pb-c.c $(BUILD)/proto/lunar.pb-c.h &: proto/lunar.proto | $(DEPS_STAMP)
	$(Q)mkdir -p $(BUILD)/proto
	@echo "  PROTOC  $<"
	$(Q)protoc-c --c_out=$(BUILD)/proto -Iproto $<

# $(BUILD)/api/X/X/x.h -> X/x.h (see exports).
$(API_LINKS): $(BUILD)/api/%:
	$(Q)mkdir -p $(@D)
	$(Q)ln -sfr $(patsubst $(firstword $(subst /, ,$*))/%,%,$*) $@

# Every object compiles with its layer's flags; one with no layer fails here.
# OBJ_FLAGS: an object's own flags, set for it alone.
define compile
	$(Q)mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(if $(LAYER),,echo "$<: in no layer of the Makefile" >&2; exit 1;) \
		$(CC) $(CPPFLAGS) $(OBJ_FLAGS) $(call layer_flags,$(LAYER)) $(CFLAGS) -c -o $@ $<
endef
$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP) $(BUILD)/proto/lunar.pb-c.h $(API_LINKS)
	$(compile)
$(BUILD)/obj/proto/lunar.pb-c.o: $(BUILD)/proto/lunar.pb-c.c | $(API_LINKS)
	$(compile)

# Each layer's compile flags, one line "layer flags...", for the scripts that
# compile outside make: tests/build/test_layers.sh and tests/fuzz/run.sh.
layers: $(LAYERS_TXT) $(API_LINKS) $(BUILD)/proto/lunar.pb-c.h
$(LAYERS_TXT): FORCE | $(DEPS_STAMP)
	$(Q)mkdir -p $(@D)
	$(Q)printf '%s\n' $(foreach l,$(LAYERS),"$(l) $(strip $(call layer_flags,$(l)))") >$@

# ---- Linking -------------------------------------------------------------------
define archive
$(1): $(2)
	$$(Q)mkdir -p $$(@D)
	@echo "  AR      $$@"
	$$(Q)rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach c,$(COMPONENTS),$(eval $(call archive,$($(c)_LIB),$(call obj,$($(c)_SRC)))))
$(eval $(call archive,$(LIBLUNAR_A),$(call obj,$(shmlib_SRC) $(common_SRC))))

# $(call link,target,sources,layers,flags): every program and liblunar.so
# link here, from their own objects (of the sources, or objects named), the
# archives of the components among the layers they use (in COMPONENTS'
# order) and those layers' packages.
# LINK_<name> adds a program's own link flags.
define link
$(1): $(call obj,$(filter %.c,$(2))) $(filter %.o,$(2)) \
	$(foreach c,$(filter $(3),$(COMPONENTS)),$($(c)_LIB))
	$$(Q)mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(CC) $$(CFLAGS) $$(LDFLAGS) $(4) -o $$@ $$(filter %.o %.a,$$^) \
		$$(call link_flags,$(3)) $$(LINK_$$(@F)) $$(LDLIBS)
endef

# The application library: libc + pthread only (-z defs proves it), exports
# lunar_* and mooncake_store_*. The file carries its soname's name.
LIBLUNAR_LINK := -shared -Wl,-z,defs -Wl,--version-script=shmlib/liblunar.map \
	-Wl,-soname,liblunar.so.1
$(eval $(call link,$(LIBLUNAR_SO1),$(shmlib_SRC) $(common_SRC),,$(LIBLUNAR_LINK)))
$(LIBLUNAR_SO1): shmlib/liblunar.map
$(LIBLUNAR_SO): $(LIBLUNAR_SO1)
	$(Q)ln -sf $(<F) $@

DAEMON := proxy engine disk master proto etcd $(AUTH) common
$(eval $(call link,$(BUILD)/bin/lunar-master,$(master_MAIN),master proto etcd $(AUTH) common))
$(eval $(call link,$(BUILD)/bin/lunar-proxy,$(proxy_MAIN),$(DAEMON)))
$(eval $(call link,$(BUILD)/bin/lunar-bench,$(bench_SRC),bench shmlib master proto etcd $(AUTH) \
	common))
$(eval $(call link,$(BUILD)/bin/lunarctl,tools/lunarctl.c $(wildcard tools/ctl/*.c),tools shmlib \
	etcd $(AUTH) common))
# memc-bench shares lunar-bench's pattern, percentiles and byte checks.
$(eval $(call link,$(BUILD)/bin/memc-bench,tools/memc-bench.c tools/bench/util.c,tools common))

# Unit tests link every library; the linker takes what each needs.
# SRC_<test> adds a test's own sources besides tests/unit/<test>.c.
LINK_test_master_table := -Wl,--wrap=calloc
# The RDMA device layer faked (tests/unit/rdma_fake.h): handshakes,
# fallbacks and keyed transfers without hardware.
RDMA_FAKE_WRAPS := $(foreach f,dev_open seg_register dev_put mem_keys qps_create qps_connect qps_destroy \
	qps_post qps_wait qps_fence qps_open qps_close mem_mr,-Wl,--wrap=eng_rdma_$(f))
LINK_test_rdma_fallback := $(RDMA_FAKE_WRAPS)
LINK_test_rdma_transfer := $(RDMA_FAKE_WRAPS)
SRC_test_rdma_fallback := tests/unit/rdma_fake.c
SRC_test_rdma_transfer := tests/unit/rdma_fake.c
SRC_test_bench_util := tools/bench/util.c
# COMP_<test>: components an integration test links besides liblunar's.
# test_rpc_auth speaks the master's RPC itself.
COMP_test_rpc_auth := proto
# test_put_ahead_rpc speaks Reserve and BatchPutCommit to the master itself.
COMP_test_put_ahead_rpc := proto
# The HA tests speak to etcd (test_etcd: the master's etcd client) and to the
# masters' RPC (test_ha) themselves.
COMP_test_etcd := master proto etcd
COMP_test_ha := proto etcd
COMP_test_ha_failover := etcd
$(foreach t,$(filter-out $(UNIT_EMU),$(UNIT_BINS)),$(eval $(call link,$(t),tests/unit/$(notdir $(t)).c \
	$(SRC_$(notdir $(t))),$(COMPONENTS) tests)))
# test_crc32c_avx512: test_crc32c with the AVX-512 fold on a CPU without
# AVX-512: crc32c.c and the test compiled again, SIMDe's plain-C AVX-512
# forced in (tests/unit/avx512_emulated.h); their objects link before
# libcommon.a, so its crc32c.o stays out.
AVX512_EMU := $(BUILD)/obj/avx512-emulated
AVX512_EMU_OBJS := $(AVX512_EMU)/common/crc32c.o $(AVX512_EMU)/tests/unit/test_crc32c.o
$(AVX512_EMU)/common/%.o: LAYER := common
$(AVX512_EMU)/tests/%.o: LAYER := tests
$(AVX512_EMU_OBJS): OBJ_FLAGS := -include tests/unit/avx512_emulated.h -Wno-psabi
$(AVX512_EMU)/%.o: %.c tests/unit/avx512_emulated.h | $(DEPS_STAMP) $(API_LINKS)
	$(compile)
$(eval $(call link,$(UNIT_EMU),$(AVX512_EMU_OBJS),common tests))
$(foreach t,$(INTEG_BINS),$(eval $(call link,$(t),tests/integration/$(notdir $(t)).c \
	$(HARNESS_SRC),$(COMP_$(notdir $(t))) shmlib $(AUTH) common tests)))
$(foreach t,$(CHAOS_BINS),$(eval $(call link,$(t),tests/chaos/$(notdir $(t)).c \
	$(HARNESS_SRC),shmlib $(AUTH) common tests)))

# A lunar-proxy and a lunar-master with failpoints compiled in
# (common/failpoint.h), for the tests/integration tests that arm them
# (test_failpoints, test_clock_jump, test_put_ahead_shutdown) only: their
# own objects under $(BUILD)/failpoints, so the release binaries never
# contain them.
failpoints: $(DEPS_STAMP)
	$(Q)$(MAKE) --no-print-directory BUILD=$(BUILD)/failpoints DEPS_STAMP=$(DEPS_STAMP) \
		CPPFLAGS="$(CPPFLAGS) -DLUNAR_FAILPOINTS" $(BUILD)/failpoints/bin/lunar-proxy \
		$(BUILD)/failpoints/bin/lunar-master

# ---- Running -------------------------------------------------------------------
# Deployment checks (scripts): manifests, podman pod, systemd units, install;
# and the RDMA tests inside a machine with soft-RoCE (tests/vm/).
DEPLOY_TESTS := tests/deploy/test_manifests.sh tests/pod/test_pod.sh tests/deploy/test_systemd.sh \
	tests/deploy/test_install.sh tests/vm/test_rdma_vm.sh
# The fuzz run inside `make test` is short; it skips (exit 77) without clang.
# (MAKEFLAGS cleared: the scripts that run make get no jobserver of ours.)
test: all failpoints
	$(Q)MAKEFLAGS= BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_TEST_SECONDS) CC="$(CC)" LDFLAGS="$(LDFLAGS)" \
		bash tests/run.sh $(UNIT_BINS) $(INTEG_BINS) $(BUILD_TESTS) tests/fuzz/run.sh \
		$(DEPLOY_TESTS)

# libFuzzer targets under ASan+UBSan (decode, meta, http), built with clang
# from the sources by tests/fuzz/run.sh, each fuzzed for FUZZ_SECONDS;
# corpus and crash reproducers in $(BUILD)/fuzz/.
FUZZ_SECONDS ?= 600
FUZZ_TEST_SECONDS ?= 20
fuzz: layers
	$(Q)BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh

unit: $(UNIT_BINS)
	$(Q)BUILD=$(BUILD) bash tests/run.sh $(UNIT_BINS)

integration: all
	$(Q)BUILD=$(BUILD) bash tests/run.sh $(INTEG_BINS)

# The long fault tests (tests/chaos/, each under 10 minutes, all under 20).
chaos: all
	$(Q)BUILD=$(BUILD) TEST_TIMEOUT=600 bash tests/run.sh $(CHAOS_BINS)

# The cluster tests with remote transfers, inside a machine with soft-RoCE,
# where their proxies move values over RDMA (tests/vm/test_rdma_vm.sh; make
# test runs its first three there, these take another three minutes).
RDMA_VM_TESTS := integration/test_put_beside integration/test_cluster \
	integration/test_batch_get_remote integration/test_kill_mid_transfer \
	integration/test_zero_copy_cluster integration/test_data_port_auth
rdma-vm: all failpoints $(UNIT_BINS) $(INTEG_BINS)
	$(Q)BUILD=$(BUILD) VM_TIMEOUT=1200 TEST_TIMEOUT=1300 VM_TESTS="$(RDMA_VM_TESTS)" \
		bash tests/run.sh tests/vm/test_rdma_vm.sh

demo: all
	$(Q)BUILD=$(BUILD) bash tools/demo.sh

# tests/lsan.supp: blocks nng 1.5.2 frees late on its own threads.
# SAN_GOAL: what runs under the sanitizer, `make test` unless given
# (make asan SAN_GOAL=chaos runs the long fault tests under ASan).
SAN_GOAL ?= test
asan:
	LUNAR_TEST_SANITIZER=address LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
		$(MAKE) BUILD=build-asan \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
		LDFLAGS="-fsanitize=address,undefined" $(SAN_GOAL)

tsan:
	LUNAR_TEST_SANITIZER=thread $(MAKE) BUILD=build-tsan CFLAGS="-O1 -g -fsanitize=thread" \
		LDFLAGS="-fsanitize=thread" $(SAN_GOAL)

# The library as liblunar.so.1.0.0, its soname link liblunar.so.1 and the
# link liblunar.so to link with. A system prefix (/usr, /usr/local) is in the
# loader's path: installed there without DESTDIR, as root, ldconfig runs;
# any other prefix puts an rpath in lunar.pc, so programs built with
# `pkg-config --libs lunar` find the library where it is.
SYSTEM_PREFIXES := /usr /usr/local
LIB_FILE := liblunar.so.1.0.0
PC_RPATH = $(if $(filter $(PREFIX),$(SYSTEM_PREFIXES)),, -Wl,-rpath,$${libdir})
RUN_LDCONFIG = [ -n "$(DESTDIR)" ] || [ -z "$(filter $(PREFIX),$(SYSTEM_PREFIXES))" ] || \
	[ "$$(id -u)" != 0 ] || ldconfig
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(LIBLUNAR_SO1) $(DESTDIR)$(PREFIX)/lib/$(LIB_FILE)
	ln -sf $(LIB_FILE) $(DESTDIR)$(PREFIX)/lib/liblunar.so.1
	ln -sf liblunar.so.1 $(DESTDIR)$(PREFIX)/lib/liblunar.so
	install -m 644 $(LIBLUNAR_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 shmlib/include/lunar.h shmlib/include/store_c.h $(DESTDIR)$(PREFIX)/include/
	sed 's|@PREFIX@|$(PREFIX)|; s|@RPATH@|$(PC_RPATH)|' shmlib/lunar.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/lunar.pc
	$(RUN_LDCONFIG)

# Removes what install put there (the folders stay).
.PHONY: uninstall
uninstall:
	rm -f $(patsubst $(BUILD)/bin/%,$(DESTDIR)$(PREFIX)/bin/%,$(BINS)) \
		$(addprefix $(DESTDIR)$(PREFIX)/lib/,$(LIB_FILE) liblunar.so.1 liblunar.so liblunar.a \
		pkgconfig/lunar.pc) $(addprefix $(DESTDIR)$(PREFIX)/include/,lunar.h store_c.h)
	$(RUN_LDCONFIG)

# The container image localhost/lunar:VERSION, offline (deploy/image.sh).
.PHONY: image
image: all
	$(Q)BUILD=$(BUILD) MAKE="$(MAKE)" bash deploy/image.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

# The check make test runs too (tests/build/test_format.sh).
.PHONY: format-check
format-check:
	$(Q)bash tests/build/test_format.sh

clean:
	rm -rf $(BUILD) build-asan build-tsan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
