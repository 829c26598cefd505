#!/usr/bin/env bash
# The suite end to end on the bundled defaults, without root and without a
# cluster: install into a temporary prefix, point the drop-ins' root at the
# fixture host in testdata/root (this machine need not have the devices),
# then walk through VERSION, INFO, ADD, LIST and DEL, first with cditool and
# then with a raw exec exactly as a container runtime makes it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

prefix=$(mktemp -d "${TMPDIR:-/tmp}/cdi-demo.XXXXXX")
if [ -z "${KEEP:-}" ]; then trap 'rm -rf "$prefix"' EXIT; fi

# Bold headings on a terminal; plain text into a file or a pipe.
if [ -t 1 ]; then
	step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
	step() { printf '\n== %s\n' "$*"; }
fi
show() { printf '$ %s\n' "$*"; "$@"; }

step "install into $prefix"
make --no-print-directory install DESTDIR="$prefix" PREFIX=/usr >/dev/null
plugins=$prefix/opt/cdi/bin conf=$prefix/etc/cdi state=$prefix/var/lib/cdi
# The virtual consoles' drop-in is opt-in on a node (a pod given one could
# write to the host's console), so make install leaves it out; the demo's
# terminals are the fixture host's, and it adds it.
install -D -m 0644 conf.d/tty.d/generic.conf "$conf/tty.d/generic.conf"
# The installed drop-ins say root "/" and stateDir /var/lib/cdi, right for a
# real node; the demo points them at the fixture and the temporary prefix.
for f in "$conf"/*.d/*.conf; do
	sed -i -e "s|\"root\": \"/\"|\"root\": \"$repo/testdata/root\"|" \
		-e "s|\"stateDir\": \"/var/lib/cdi\"|\"stateDir\": \"$state\"|" "$f"
done
ls "$plugins" "$conf"/*.d
cditool() { "$prefix/usr/bin/cditool" --conf-dir "$conf" --path "$plugins" "$@"; }

step "cditool: the versions each GPU plugin speaks, and what it offers"
show cditool version gpu
show cditool info gpu

step "cditool: allocate one GPU near NUMA node 1 and two terminals"
show cditool add gpu demo-gpu gpu:1 --numa 1
show cditool add tty demo-tty tty:2

step "cditool: what is allocated"
show cditool list gpu
show cditool list tty

step "a runtime's raw calls: VERSION, then ADD and DEL of a serial adapter"
raw() { env -i "$@" "$plugins/generic" < "$conf/dev.d/generic.conf"; }
echo "\$ env -i CDI_COMMAND=VERSION $plugins/generic < $conf/dev.d/generic.conf"
raw CDI_COMMAND=VERSION
echo "\$ env -i CDI_COMMAND=ADD CDI_VERSION=0.1.0 CDI_REQUEST=dev-serial:1 CDI_REQUEST_ID=demo-serial $plugins/generic < $conf/dev.d/generic.conf"
raw CDI_COMMAND=ADD CDI_VERSION=0.1.0 CDI_REQUEST=dev-serial:1 CDI_REQUEST_ID=demo-serial
echo "\$ env -i CDI_COMMAND=DEL CDI_VERSION=0.1.0 CDI_REQUEST_ID=demo-serial ... (no output on success)"
raw CDI_COMMAND=DEL CDI_VERSION=0.1.0 CDI_REQUEST_ID=demo-serial
echo "exit status $?"

step "cditool: release everything"
show cditool del gpu demo-gpu
show cditool del tty demo-tty
show cditool list tty

step "the bridge: the plugins as the kubelet sees them, one node, the local store"
# A kubelet-side client stands in for the kubelet: it serves kubelet.sock,
# lets the bridge register, and allocates as pod admission would. Unix
# socket paths are short, so the directory is not under $prefix.
dp=$(mktemp -d "${TMPDIR:-/tmp}/cdi-dp.XXXXXX")
trap 'rm -rf "$dp"; [ -n "${KEEP:-}" ] || rm -rf "$prefix"' EXIT
# Built as make build builds the tools, so that it reuses their compiled
# gRPC and kubelet API packages: seconds, even on a first run.
echo "building the kubelet's side, bridge/internal/testing/demokubelet"
CGO_ENABLED=0 go build -trimpath -o "$prefix/demokubelet" ./bridge/internal/testing/demokubelet
"$prefix/demokubelet" --device-plugin-dir "$dp" --domain cdi.local --instance-pool gpu-drm --pool tty-generic --count 2 &
kubelet=$!
bridge_args=(--node-name demo --conf-dir "$conf" --plugin-path "$plugins" --device-plugin-dir "$dp"
	--domain cdi.local --store local --local-store "$state/bridge/instances.json"
	--metrics-address "" --pod-resources-socket "" --cdi-spec-dir "$prefix/run/cdi")
printf '$ cdi-bridge'; printf ' %q' "${bridge_args[@]}"; printf ' 2>bridge.log &\n'
"$prefix/usr/bin/cdi-bridge" "${bridge_args[@]}" 2>"$prefix/bridge.log" &
bridge=$!
if ! wait "$kubelet"; then
	echo "the kubelet-side client failed; the bridge's log:"; cat "$prefix/bridge.log"
	kill "$bridge"; exit 1
fi
kill -TERM "$bridge" && wait "$bridge"
echo "bridge stopped (SIGTERM): it withdrew its devices and removed its sockets"

step "the CDI spec files the bridge wrote: how a runtime resolves those cdi device names"
# One file per pool; the runtime (containerd 2, CRI-O) reads them from
# /var/run/cdi on a node. They stay when the bridge stops.
(cd "$prefix/run/cdi" && ls)
echo "$ cat $prefix/run/cdi/cdi-bridge_cdi.local-gpu-drm.json"
tr -d '\n' < "$prefix/run/cdi/cdi-bridge_cdi.local-gpu-drm.json" | sed 's/},{"name"/},\n  {"name"/g'; echo

step "cditool: the bridge's allocations, by slot id, as the plugins keep them"
show cditool list gpu
show cditool list tty
show cditool gc --all gpu
show cditool gc --all tty

step "done"
echo "plugin state files, now empty of allocations: $(cd "$state" && ls */*.json | grep -v '^bridge/' | xargs)"
echo "the bridge's store, $state/bridge/instances.json, still records its claims: on a node, slot reclaim releases them once no container holds them"
[ -n "${KEEP:-}" ] && echo "kept $prefix (KEEP is set)"
exit 0
