#!/bin/sh
# The test plan of the cgroup v2 VM lane, run as root inside the guest by
# stage2 (busybox sh). Read from the repository share at boot, so editing it
# needs no initramfs rebuild.
#
# /src     the repository, read-only (tests find ../../testdata from /src/oci/backend)
# /vmbin   static sandcell, oci.test (package oci/backend), limits.test, the seccomp probe, gcc stand-in
# /layers  the layer store, read-only share under a tmpfs overlay (lock files)
# /out     writable: one log per step and summary.txt, copied to the host's log dir
#
# Every step's output goes to the console and to /out/<step>.log. CI=true
# makes a missing privilege or layer a failure, SANDCELL_EXPECT_CGROUP2=1 makes
# a host that is not pure cgroup v2 one, and a skipped test fails its step:
# nothing is left out silently. What is left out on purpose is listed below
# (OCI_EXCLUDE, OCI_SKIP, the limits selection).

export PATH=/vmbin:/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/root CI=true SANDCELL_EXPECT_CGROUP2=1 SANDCELL_LAYER_DIR=/layers
out=/out
summary=$out/summary.txt
: >"$summary"

# Test selection in oci. Every test runs except these, each left out for a
# reason that is not about cgroups (the host lane runs them all):
#   TestTimeouts  asserts the verdict within limit + 0.5 s, Prepare and
#                 teardown included. Under TCG they alone take longer: 1.64 s
#                 (busy loop) and 1.61 s (ignores SIGTERM) for a 1 s limit.
#                 The timeout verdict and its teardown are covered without a
#                 wall-clock bound by TestCgroupTeardownEveryVerdict/timeout.
#   TestCancel    cancels 300 ms after oci.Run begins, assuming the program
#                 runs by then; under TCG Prepare takes longer and the test
#                 fails with "context canceled" from Prepare. Cancellation and
#                 its teardown are covered by TestCgroupTeardownEveryVerdict/
#                 cancelled, whose clock starts after Start.
#   */gvisor      the gVisor backend's subtests (forEachBackend). runsc is
#                 shared in (doctor lists it), but the backend is still being
#                 built: on 2026-11-29 every gvisor subtest failed with
#                 internal_error, on the host too (the gofer: "remounting root
#                 as read-only ... operation not permitted"). Drop the skip
#                 once they pass on the host; they then run here on cgroup v2.
# -test.short makes TestTeardownSequential do 20 runs instead of 200 (200
# took 258 s under TCG).
#   TestPoolShrinksAndRefills  its pool forgets a key after 300 ms idle, less
#                 than one container takes to prepare under TCG, so the
#                 refill it waits for never comes; the pool's logic is not
#                 cgroup-version specific and runs on the host in CI (the
#                 other pool tests run here).
#   TestLivePoolForgets  the same for the live sandboxes' pool: its kind is
#                 forgotten after 3 s unasked, and under TCG a prepared live
#                 sandbox (mkfs, loop, overlay, container) can take longer.
OCI_EXCLUDE='TestTimeouts TestCancel TestPoolShrinksAndRefills TestLivePoolForgets'
OCI_SKIP='/gvisor'
[ -f "$out/selection.env" ] && . "$out/selection.env"
[ -n "${SANDCELL_VM_SKIP:-}" ] && OCI_SKIP=$SANDCELL_VM_SKIP

failed=

# step NAME FUNC: runs FUNC, logs it, records its status and time.
step() {
	name=$1
	shift
	echo "=== STEP $name"
	t0=$(date +%s)
	{
		"$@"
		echo $? >"/tmp/rc.$name"
	} 2>&1 | tee "$out/$name.log"
	rc=$(cat "/tmp/rc.$name")
	dt=$(($(date +%s) - t0))
	if [ "$rc" = 0 ]; then
		echo "PASS  $name (${dt}s)" >>"$summary"
	else
		echo "FAIL  $name (${dt}s, status $rc)" >>"$summary"
		failed="$failed $name"
	fi
	echo "=== END $name: status $rc, ${dt}s"
}

# gotest DIR BINARY ARGS...: runs a test binary from DIR, lists every test's
# result in the summary and fails on any failure or skip.
gotest() {
	dir=$1 bin=$2
	shift 2
	cd "$dir" || return 1
	"$bin" -test.v -test.count=1 "$@" >/tmp/gotest.log 2>&1
	rc=$?
	cat /tmp/gotest.log
	grep -E '^ *--- (PASS|FAIL|SKIP)' /tmp/gotest.log | sed 's/^/      /' >>"$summary"
	if grep -qE '^ *--- SKIP' /tmp/gotest.log; then
		echo "a test skipped: the VM lane allows no skip (fix the guest or list the test in OCI_SKIP)"
		[ "$rc" = 0 ] && rc=1
	fi
	return $rc
}

# facts: the kernel, and a pure cgroup v2 host: one cgroup2 mount at
# /sys/fs/cgroup, no v1 hierarchy, memory, pids and cpu available.
facts() {
	echo "booted: $(cut -d' ' -f1 /proc/uptime)s since the kernel started"
	uname -a
	echo "cmdline: $(cat /proc/cmdline)"
	echo "cpus: $(nproc)"
	free -m
	echo "--- cgroup mounts"
	grep -E ' - cgroup2? ' /proc/self/mountinfo
	echo "--- /sys/fs/cgroup/cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"
	echo "--- /sys/fs/cgroup/cgroup.subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
	v1=$(grep -c ' - cgroup ' /proc/self/mountinfo)
	v2=$(grep -c ' - cgroup2 ' /proc/self/mountinfo)
	if [ "$v1" != 0 ] || [ "$v2" != 1 ] || ! grep -qE '^[^ ]+ [^ ]+ [^ ]+ / /sys/fs/cgroup .* - cgroup2 ' /proc/self/mountinfo; then
		echo "not a pure cgroup v2 host: $v1 v1 mounts, $v2 cgroup2 mounts"
		return 1
	fi
	for c in memory pids cpu; do
		grep -qw "$c" /sys/fs/cgroup/cgroup.controllers || { echo "controller $c missing"; return 1; }
	done
}

# doctor: sandcell's own report must pass and say cgroup v2 (mode unified).
doctor() {
	sandcell --layer-dir /layers doctor >/tmp/doctor.txt
	rc=$?
	cat /tmp/doctor.txt
	[ "$rc" = 0 ] || { echo "sandcell doctor exited $rc"; return 1; }
	grep -qE '^ok +cgroups +mode unified' /tmp/doctor.txt || { echo "doctor does not report cgroup v2 (mode unified)"; return 1; }
}

# json FILE KEY: the string or number value of a top-level key of sandcell's --json output.
json() { sed -n "s/^  \"$2\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$1"; }

# cli: the sandcell binary end to end on the default parent /sandcell.
cli() {
	# A run that hangs dumps its goroutines (SIGQUIT) and fails the step,
	# instead of eating the VM's whole budget in silence (a first run hung
	# once on 2026-12-01, under a loaded host; it did not recur in 3 runs).
	sc="timeout -s QUIT 120 sandcell --layer-dir /layers"
	bad=0
	expect() { # FILE STATUS: the run's status must be STATUS
		got=$(json "$1" status)
		cat "$1"
		if [ "$got" != "$2" ]; then
			echo "^^^ status $got, want $2"
			bad=1
		fi
	}
	$sc run --lang sh --json --code 'echo hello from cgroup $(cut -d: -f3 /proc/self/cgroup)' >/tmp/r1.json
	expect /tmp/r1.json ok
	$sc run --lang python --json --memory 32MiB --code 'x = bytearray(200 << 20)' >/tmp/r2.json 2>/dev/null
	expect /tmp/r2.json memory_limit
	$sc run --lang python --json --cpus 0.5 --timeout 3s --code 'while True: pass' >/tmp/r3.json
	expect /tmp/r3.json timeout
	$sc run --lang sh --json --pids 8 --code 'i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; echo started $i' >/tmp/r4.json
	expect /tmp/r4.json error
	grep -q 'started 40' /tmp/r4.json && { echo "40 forks under --pids 8"; bad=1; }

	d=/sys/fs/cgroup/sandcell
	echo "--- root cgroup.subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
	echo "--- parent $d"
	for f in memory.max memory.swap.max pids.max cgroup.subtree_control; do
		echo "$f: $(cat $d/$f)"
	done
	mem_kb=$(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo)
	# half of MemTotal, rounded down to whole pages by the kernel
	[ "$(cat $d/memory.max)" = $((mem_kb * 1024 / 2 / 4096 * 4096)) ] || { echo "memory.max is not half of MemTotal"; bad=1; }
	[ "$(cat $d/memory.swap.max)" = 0 ] || { echo "memory.swap.max is not 0"; bad=1; }
	[ "$(cat $d/pids.max)" = 16384 ] || { echo "pids.max is not 16384"; bad=1; }
	for c in cpu memory pids; do
		grep -qw $c $d/cgroup.subtree_control || { echo "$c not enabled for the children"; bad=1; }
	done
	left=$(find $d -mindepth 1 -type d)
	[ -z "$left" ] || { echo "cgroups left behind: $left"; bad=1; }
	left=$(ls /run/sandcell 2>/dev/null)
	[ -z "$left" ] || { echo "state left behind in /run/sandcell: $left"; bad=1; }
	return $bad
}

# limits: the tests on real cgroups only (TestRoot*). The fake-tree unit tests
# do not depend on the kernel and run on the host (make test); under TCG one
# of them (TestRemoveStaleV1/hybrid) outran its fake 200 ms settle time.
# TestRootDelegateV1 is the v1 half of delegation (the host runs it);
# TestRootDelegateV2 runs here.
limits_tests() { gotest /src/limits /vmbin/limits.test -test.timeout=5m -test.run '^TestRoot' -test.skip '^TestRootDelegateV1$'; }

# oci_run: the -test.run pattern, every test of oci.test but OCI_EXCLUDE,
# unless SANDCELL_VM_RUN overrides it.
oci_run() {
	if [ -n "${SANDCELL_VM_RUN:-}" ]; then
		echo "$SANDCELL_VM_RUN"
		return
	fi
	names=$(/vmbin/oci.test -test.list . | grep '^Test' | grep -vxF "$(echo "$OCI_EXCLUDE" | tr ' ' '\n')" | tr '\n' '|')
	echo "^(${names%|})\$"
}

oci_tests() {
	OCI_RUN=$(cd /src/oci/backend && oci_run)
	gotest /src/oci/backend /vmbin/oci.test -test.short -test.timeout=20m -test.run "$OCI_RUN" -test.skip "$OCI_SKIP"
}

leftovers() {
	left=$(find /sys/fs/cgroup -mindepth 1 -type d)
	echo "cgroups below the root: ${left:-none}"
	[ "$left" = /sys/fs/cgroup/sandcell ] || [ -z "$left" ] || { echo "test cgroups left behind"; return 1; }
	[ -z "$(find /sys/fs/cgroup/sandcell -mindepth 1 -type d 2>/dev/null)" ]
}

# rootless: tier 2 on cgroup v2. Root delegates a subtree to an
# unprivileged user (sandcell setup), puts a shell into the delegated
# cgroup (v2 lets a process move only within a subtree it can write), and
# the user's sandcell, in its own user namespace, must enforce every limit
# there: the OOM verdict from memory.events, pids, cpu; and leave no cgroup
# behind.
rootless() {
	u=sandcell-rl uid=2000
	grep -q "^$u:" /etc/passwd || {
		echo "$u:x:$uid:$uid::/tmp/$u:/bin/sh" >>/etc/passwd
		echo "$u:x:$uid:" >>/etc/group
	}
	mkdir -p /tmp/$u && chown $uid:$uid /tmp/$u
	sandcell setup --user $u --memory 1GiB --pids 512 || return 1
	d=/sys/fs/cgroup/sandcell-u$uid
	ls -ln $d/user | head -5
	cat >/tmp/$u/checks.sh <<'CHECKS'
sc="sandcell --shared-home /layers"
bad=0
$sc doctor | head -3
$sc doctor | grep -qE '^ok +tier +tier 2' || { echo "doctor does not say tier 2"; bad=1; }
expect() { # STATUS ARGS...: a run's status
	want=$1; shift
	$sc run --json "$@" >/tmp/r.json 2>/tmp/r.err
	got=$(sed -n 's/^  "status": "\(.*\)",$/\1/p' /tmp/r.json)
	[ "$got" = "$want" ] || { echo "run $*: status $got, want $want"; cat /tmp/r.json /tmp/r.err; bad=1; }
}
expect ok --lang sh --code 'echo hello from $(cut -d: -f3 /proc/self/cgroup)'
expect memory_limit --lang python --memory 32MiB --code 'x = bytearray(200 << 20)'
expect timeout --lang python --cpus 0.5 --timeout 3s --code 'while True: pass'
expect error --lang sh --pids 8 --code 'i=0; while [ $i -lt 40 ]; do sleep 30 & i=$((i+1)); done; echo started $i'
grep -q '"memory": "cgroup"' /tmp/r.json || { echo "limits_enforced does not claim the memory cgroup"; bad=1; }
exit $bad
CHECKS
	chown $uid:$uid /tmp/$u/checks.sh
	sh -c "echo \$\$ >$d/user/cgroup.procs && exec su -s /bin/sh $u -c 'cd /tmp/$u && HOME=/tmp/$u TMPDIR=/tmp/$u sh checks.sh'"
	rc=$?
	left=$(find $d -mindepth 2 -type d -path '*/runs/*')
	[ -z "$left" ] || { echo "run cgroups left behind: $left"; rc=1; }
	echo "--- $d: memory.max $(cat $d/memory.max), pids.max $(cat $d/pids.max), owner $(stat -c %u $d/memory.max) (must stay 0)"
	[ "$(stat -c %u $d/memory.max)" = 0 ] || { echo "the delegated subtree's own limits are writable by the user"; rc=1; }
	sandcell setup --user $u --remove || rc=1
	return $rc
}

step facts facts
step doctor doctor
step cli cli
step limits limits_tests
step oci oci_tests
step rootless rootless
step leftovers leftovers

echo "oci: excluded ${SANDCELL_VM_RUN:+(overridden by SANDCELL_VM_RUN) }$OCI_EXCLUDE; -test.skip '$OCI_SKIP'; -test.short" >>"$summary"
[ -z "$failed" ] || { echo "failed steps:$failed" | tee -a "$summary"; exit 1; }
