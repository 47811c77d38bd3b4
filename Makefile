# Lunar - one top Makefile. `make` builds everything with warnings as errors,
# `make test` runs every test, `make demo` runs a single-node store.
# Folders are globbed: a new .c file in a component folder joins its library.

BUILD ?= build
PREFIX ?= /usr/local
CC ?= cc
CFLAGS ?= -O2 -g
override CFLAGS += -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
	-fPIC -D_GNU_SOURCE -MMD -MP -pthread \
	-Ishmlib/include -Icommon -Iauth -Iproto -I$(BUILD)/proto -I.
LDLIBS_DAEMON := -lnng -lprotobuf-c -luring -lsodium -lpthread
# lunar-master's etcd client (master/etcd.c, HA) only: the proxy does not link it.
LIBCURL := $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)
CMOCKA_LIBS := -lcmocka

ifeq ($(V),1)
Q :=
else
Q := @
endif

COMMON_SRC := $(wildcard common/*.c)
AUTH_SRC := $(wildcard auth/*.c)
SHMLIB_SRC := $(wildcard shmlib/*.c)
PROTO_SRC := $(BUILD)/proto/lunar.pb-c.c $(wildcard proto/*.c)
MASTER_SRC := $(filter-out master/main.c,$(wildcard master/*.c))
ENGINE_SRC := $(wildcard engine/*.c)
DISK_SRC := $(wildcard disk/*.c)
PROXY_SRC := $(filter-out proxy/main.c,$(wildcard proxy/*.c))
UNIT_SRC := $(wildcard tests/unit/test_*.c)
INTEG_SRC := $(wildcard tests/integration/test_*.c)
HARNESS_SRC := $(wildcard tests/integration/harness*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(patsubst $(BUILD)/%,%,$(1)))

LIBCOMMON := $(BUILD)/lib/libcommon.a
LIBAUTH := $(BUILD)/lib/libauth.a
LIBSHM := $(BUILD)/lib/libshm.a
LIBPROTO := $(BUILD)/lib/libproto.a
LIBMASTER := $(BUILD)/lib/libmaster.a
LIBENGINE := $(BUILD)/lib/libengine.a
LIBDISK := $(BUILD)/lib/libdisk.a
LIBPROXY := $(BUILD)/lib/libproxy.a
LIBLUNAR_SO := $(BUILD)/lib/liblunar.so
LIBLUNAR_A := $(BUILD)/lib/liblunar.a
DAEMON_LIBS := $(LIBPROXY) $(LIBENGINE) $(LIBDISK) $(LIBMASTER) $(LIBPROTO) $(LIBAUTH) $(LIBCOMMON)

BINS := $(BUILD)/bin/lunar-master $(BUILD)/bin/lunar-proxy $(BUILD)/bin/lunarctl \
	$(BUILD)/bin/lunar-bench
# Built and tested, not installed: bench-vs-peers.sh's memcached client.
TOOLS := $(BUILD)/bin/memc-bench
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
INTEG_BINS := $(patsubst tests/integration/%.c,$(BUILD)/tests/integration/%,$(INTEG_SRC))
DEPS_STAMP := $(BUILD)/.deps-ok

.SECONDARY:
.PHONY: all test unit integration demo install clean deps asan tsan format fuzz
all: $(BINS) $(TOOLS) $(LIBLUNAR_SO) $(LIBLUNAR_A) $(UNIT_BINS) $(INTEG_BINS)

deps: $(DEPS_STAMP)
$(DEPS_STAMP): mk/deps.sh
	$(Q)bash mk/deps.sh
	$(Q)mkdir -p $(@D) && touch $@

$(BUILD)/proto/lunar.pb-c.c $(BUILD)/proto/lunar.pb-c.h &: proto/lunar.proto | $(DEPS_STAMP)
	$(Q)mkdir -p $(BUILD)/proto
	@echo "  PROTOC  $<"
	$(Q)protoc-c --c_out=$(BUILD)/proto -Iproto $<

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP) $(BUILD)/proto/lunar.pb-c.h
	$(Q)mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/obj/proto/lunar.pb-c.o: $(BUILD)/proto/lunar.pb-c.c
	$(Q)mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

define archive
$(1): $(2)
	$$(Q)mkdir -p $$(@D)
	@echo "  AR      $$@"
	$$(Q)rm -f $$@ && ar rcs $$@ $$^
endef
$(eval $(call archive,$(LIBCOMMON),$(call obj,$(COMMON_SRC))))
$(eval $(call archive,$(LIBAUTH),$(call obj,$(AUTH_SRC))))
$(eval $(call archive,$(LIBSHM),$(call obj,$(SHMLIB_SRC))))
$(eval $(call archive,$(LIBPROTO),$(call obj,$(PROTO_SRC))))
$(eval $(call archive,$(LIBMASTER),$(call obj,$(MASTER_SRC))))
$(eval $(call archive,$(LIBENGINE),$(call obj,$(ENGINE_SRC))))
$(eval $(call archive,$(LIBDISK),$(call obj,$(DISK_SRC))))
$(eval $(call archive,$(LIBPROXY),$(call obj,$(PROXY_SRC))))
$(eval $(call archive,$(LIBLUNAR_A),$(call obj,$(SHMLIB_SRC) $(COMMON_SRC))))

# The application library: libc + pthread only, exports lunar_* and mooncake_store_*.
$(LIBLUNAR_SO): $(call obj,$(SHMLIB_SRC) $(COMMON_SRC)) shmlib/liblunar.map
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) -shared -pthread -Wl,--version-script=shmlib/liblunar.map -Wl,-soname,liblunar.so.1 \
		-o $@ $(filter %.o,$^)

$(BUILD)/bin/lunar-master: $(call obj,master/main.c) $(LIBMASTER) $(LIBPROTO) $(LIBAUTH) $(LIBCOMMON)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_DAEMON) $(LIBCURL)

$(BUILD)/bin/lunar-proxy: $(call obj,proxy/main.c) $(DAEMON_LIBS)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS_DAEMON)

# lunar-bench also speaks the master's RPC (--master): its modes live in tools/bench/.
$(BUILD)/bin/lunar-bench: $(call obj,tools/lunar-bench.c $(wildcard tools/bench/*.c)) $(LIBSHM) \
		$(LIBMASTER) $(LIBPROTO) $(LIBAUTH) $(LIBCOMMON)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lnng -lprotobuf-c -lsodium -lpthread -lm

# memc-bench shares lunar-bench's pattern, percentiles and byte checks.
$(BUILD)/bin/memc-bench: $(call obj,tools/memc-bench.c tools/bench/util.c) $(LIBCOMMON)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lpthread -lm

# lunarctl's admin verbs, HTTP client and JSON reader live in tools/ctl/.
$(BUILD)/bin/lunarctl: $(call obj,tools/lunarctl.c $(wildcard tools/ctl/*.c)) $(LIBSHM) \
		$(LIBAUTH) $(LIBCOMMON)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lsodium -lpthread -lm

$(BUILD)/bin/%: $(call obj,tools/%.c) $(LIBSHM) $(LIBCOMMON)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lpthread -lm

# Unit tests link every internal library; the linker takes what each needs.
# LINK_<test> adds a test's own link flags.
LINK_test_master_table := -Wl,--wrap=calloc
# test_bench_util tests the benchmarks' own helpers.
$(BUILD)/tests/unit/test_bench_util: $(call obj,tools/bench/util.c)

$(BUILD)/tests/unit/%: $(call obj,tests/unit/%.c) $(DAEMON_LIBS) $(LIBSHM)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LIBCOMMON) $(LDLIBS_DAEMON) $(CMOCKA_LIBS) $(LINK_$(*F))

$(BUILD)/tests/integration/%: $(call obj,tests/integration/%.c $(HARNESS_SRC)) $(LIBSHM) $(LIBAUTH) \
		$(LIBCOMMON)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(CMOCKA_LIBS) -lsodium -lpthread

# The HA tests speak to etcd (test_etcd: the master's etcd client) and to
# the masters' RPC (test_ha) themselves.
$(BUILD)/tests/integration/test_etcd: $(call obj,tests/integration/test_etcd.c $(HARNESS_SRC)) \
		$(LIBMASTER) $(LIBSHM) $(LIBAUTH) $(LIBCOMMON)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(CMOCKA_LIBS) $(LIBCURL) -lsodium -lpthread
$(BUILD)/tests/integration/test_ha: $(call obj,tests/integration/test_ha.c $(HARNESS_SRC)) \
		$(LIBPROTO) $(LIBSHM) $(LIBAUTH) $(LIBCOMMON)
	$(Q)mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(CMOCKA_LIBS) -lnng -lprotobuf-c -lsodium -lpthread

# The fuzz run inside `make test` is short; it skips (exit 77) without clang.
test: all
	$(Q)BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_TEST_SECONDS) bash tests/run.sh $(UNIT_BINS) \
		$(INTEG_BINS) tests/fuzz/run.sh

# libFuzzer targets under ASan+UBSan, built with clang from the sources by
# tests/fuzz/run.sh; corpus and crash reproducers in $(BUILD)/fuzz/.
FUZZ_SECONDS ?= 600
FUZZ_TEST_SECONDS ?= 45
fuzz:
	$(Q)BUILD=$(BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) bash tests/fuzz/run.sh

unit: $(UNIT_BINS)
	$(Q)BUILD=$(BUILD) bash tests/run.sh $(UNIT_BINS)

integration: all
	$(Q)BUILD=$(BUILD) bash tests/run.sh $(INTEG_BINS)

demo: all
	$(Q)BUILD=$(BUILD) bash tools/demo.sh

asan:
	LUNAR_TEST_SANITIZER=address $(MAKE) BUILD=build-asan \
		CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
		LDFLAGS="-fsanitize=address,undefined" test

tsan:
	LUNAR_TEST_SANITIZER=thread $(MAKE) BUILD=build-tsan CFLAGS="-O1 -g -fsanitize=thread" test

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(LIBLUNAR_SO) $(DESTDIR)$(PREFIX)/lib/liblunar.so.1
	ln -sf liblunar.so.1 $(DESTDIR)$(PREFIX)/lib/liblunar.so
	install -m 644 $(LIBLUNAR_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 shmlib/include/lunar.h shmlib/include/store_c.h $(DESTDIR)$(PREFIX)/include/
	sed 's|@PREFIX@|$(PREFIX)|' shmlib/lunar.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/lunar.pc

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-tsan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
