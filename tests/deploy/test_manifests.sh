#!/usr/bin/env bash
# test_manifests.sh - the Kubernetes manifests in deploy/ pass their kinds'
# schemas and Lunar's rules (deploy/validate/validate.js), offline; and the
# validator does catch a broken document. Its npm packages, pinned by
# deploy/validate/package-lock.json, are installed once into
# $BUILD/k8s-validate. Exit 0 pass, 77 skipped (no node or npm, or the npm
# registry unreachable for the first install), 1 fail.
set -u

BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.."
skip() {
	echo "skipped: $*"
	exit 77
}
command -v node >/dev/null || skip "node not installed (apt-get install nodejs npm)"

mods=$BUILD/k8s-validate
if ! cmp -s deploy/validate/package-lock.json "$mods/package-lock.json" ||
	[ ! -d "$mods/node_modules/kubernetes-models" ]; then
	command -v npm >/dev/null || skip "npm not installed (apt-get install npm)"
	rm -rf "$mods" && mkdir -p "$mods" &&
		cp deploy/validate/package.json deploy/validate/package-lock.json "$mods"/ || exit 1
	if ! out=$(cd "$mods" && timeout 180 npm ci --no-audit --no-fund --ignore-scripts 2>&1); then
		rm -rf "$mods"
		skip "npm ci of kubernetes-models failed (registry unreachable?): $(echo "$out" | grep -m1 -i 'err' )"
	fi
fi
export NODE_PATH=$PWD/$mods/node_modules

version=$("$BUILD"/bin/lunar-proxy --version | awk '{print $2}') || exit 1
node deploy/validate/validate.js --image "localhost/lunar:$version" deploy/*.yaml || exit 1

# A validator that passes everything proves nothing: these must fail.
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/type.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: containers-not-a-list}
spec: {containers: oops}
YAML
cat >"$tmp/required.yaml" <<'YAML'
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: no-selector}
spec:
  template: {spec: {containers: [{name: c, image: i}]}}
YAML
cat >"$tmp/key.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: open-master-without-key}
spec:
  containers: [{name: m, image: i, command: [lunar-master, --listen, 0.0.0.0]}]
YAML
cat >"$tmp/mode.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: key-readable-by-others}
spec:
  containers:
    - name: p
      image: i
      command: [lunar-proxy, --cluster-key, /k/cluster.key]
      volumeMounts: [{name: k, mountPath: /k}]
  volumes: [{name: k, secret: {secretName: s, defaultMode: 0644}}]
YAML
cat >"$tmp/replicas.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: two-masters-no-election}
spec:
  replicas: 2
  selector: {matchLabels: {a: m}}
  template:
    metadata: {labels: {a: m}}
    spec: {containers: [{name: m, image: i, command: [lunar-master, --listen, 127.0.0.1]}]}
YAML
cat >"$tmp/advertise.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: advertise-var-undefined}
spec:
  containers:
    - name: m
      image: i
      command: [lunar-master, --listen, 127.0.0.1, --etcd, "http://e:2379", --advertise, "tcp://$(POD_IP):50051"]
YAML
cat >"$tmp/loopback.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: advertise-loopback}
spec:
  containers:
    - name: m
      image: i
      command: [lunar-master, --listen, 127.0.0.1, --etcd, "http://e:2379", --advertise, "tcp://127.0.0.1:50051"]
YAML
for f in "$tmp"/*.yaml; do
	if out=$(node deploy/validate/validate.js "$f" 2>&1); then
		echo "$out"
		echo "FAIL: the validator passed $(basename "$f")"
		exit 1
	fi
	echo "  rejected as it should: $(basename "$f" .yaml): $(echo "$out" | sed -n 2p | sed 's/^ *//')"
done
