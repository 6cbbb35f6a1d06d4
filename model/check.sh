#!/usr/bin/env bash
# model/check.sh: check model/weir.pml, the model of weir's lease protocol,
# model/limit.pml, the model of a queue's global limit's claim,
# model/share.pml, the model of the shares that keep it,
# model/keyshare.pml, the model of the shares of a queue's keys that keep its
# limit per key, and model/ready.pml, the model of the ready list's mode, with
# spin (docs/design/model.md). `make model` runs it.
#
# 1. The protocols as weir runs them, each model in one or more configurations,
#    searched exhaustively (no bitstate hashing, no hash compaction): any error,
#    or a search that does not complete, fails the script.
# 2. Each variant that breaks the protocol must make spin find a violation of the
#    property it breaks; a variant that passes means the property is vacuous, and
#    fails the script. The shortest counterexample found is printed.
#
# Needs spin and a C compiler. Everything is built in a temporary directory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
model="$here/weir.pml"
CC=${CC:-gcc}

if ! command -v spin >/dev/null 2>&1; then
	echo "model/check.sh: spin is not installed (Debian/Ubuntu: apt-get install spin)" >&2
	exit 2
fi
if ! command -v "$CC" >/dev/null 2>&1; then
	echo "model/check.sh: no C compiler ($CC) to build spin's verifier" >&2
	exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/weir-model.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Memory cap for one search, in MB (pan stops, and this script fails, above it).
memlim=${WEIR_MODEL_MEMLIM:-4096}

# build DIR "CFLAGS" SPIN-DEFINES...: generate and compile the verifier in $work/DIR.
build() {
	local dir="$work/$1" cflags=$2
	shift 2
	mkdir -p "$dir"
	cp "$model" "$dir/weir.pml"
	(cd "$dir" && spin "$@" -a weir.pml >spin.log 2>&1) || {
		cat "$dir/spin.log" >&2
		return 1
	}
	# shellcheck disable=SC2086 # cflags is a list of flags
	(cd "$dir" && "$CC" $cflags -w -DSAFETY -DNOFAIR -DMEMLIM="$memlim" -o pan pan.c) || return 1
}

fail=0
# Extra flags for the verifier's compiler (the share model's state vectors
# are compressed: -DCOLLAPSE).
pan_cflags=""
# How a broken variant's verifier is built and run: small searches, so a quick
# build, and iterative shortening (-i) for a shortest trail.
broken_cflags="-O0 -DREACH"
broken_pan="-i -m10000 -w22"

# 1. The protocol: exhaustive searches that must find nothing.
exhaustive() {
	local name=$1
	shift
	echo "== $name ($*)"
	build "$name" "-O2 $pan_cflags" "$@" || { fail=1; return; }
	local out="$work/$name/pan.out"
	(cd "$work/$name" && ./pan -m200000 -w24 >"$out" 2>&1) || true
	grep -E 'State-vector|states, stored|transitions|total actual memory|elapsed time' "$out" | sed 's/^[[:space:]]*/   /' || true
	if ! grep -q 'errors: 0$' "$out" || grep -qE 'Search not completed|max search depth too small|reached -DMEMLIM' "$out"; then
		echo "FAIL: $name: spin found an error or did not finish the search:" >&2
		grep -E 'violated|error|Search not completed|MEMLIM' "$out" >&2 || true
		if [ -f "$work/$name/weir.pml.trail" ]; then
			(cd "$work/$name" && spin "$@" -T -B -t weir.pml) >&2 || true
		fi
		fail=1
		return
	fi
	# Every statement of the model must have been reached (only the closing
	# "-end-" of the endless loops may stay unreached): a step that can never
	# happen would be a property checked in vain.
	local unreached
	unreached=$(sed -n '/^unreached in/,$p' "$out" | grep -E '^[[:space:]]+weir\.pml:' | grep -v '"-end-"' || true)
	if [ -n "$unreached" ]; then
		echo "FAIL: $name: steps of the model never reached:" >&2
		echo "$unreached" >&2
		fail=1
		return
	fi
	echo "   ok: no errors; every step of the model reached"
}

# 2. A broken variant: spin must find a violation whose assertion matches PATTERN.
broken() {
	local variant=$1 property=$2 pattern=$3
	shift 3
	echo "== -D$variant: must violate $property"
	# Small searches: a quick build matters more than a fast verifier.
	build "$variant" "$broken_cflags $pan_cflags" "-D$variant" "$@" || { fail=1; return; }
	local out="$work/$variant/pan.out"
	# -i: iterative shortening, so that the trail printed is a shortest one.
	# shellcheck disable=SC2086 # broken_pan is a list of flags
	(cd "$work/$variant" && ./pan $broken_pan >"$out" 2>&1) || true
	if [ ! -f "$work/$variant/weir.pml.trail" ]; then
		echo "FAIL: -D$variant: spin found no error: the $property check is vacuous" >&2
		fail=1
		return
	fi
	local trail="$work/$variant/trail.txt"
	(cd "$work/$variant" && spin "-D$variant" "$@" -T -B -t weir.pml >"$trail" 2>&1) || true
	if ! grep -q "text of failed assertion: assert(.*$pattern" "$trail"; then
		echo "FAIL: -D$variant: spin found an error, but not the expected $property violation:" >&2
		cat "$trail" >&2
		fail=1
		return
	fi
	sed -n '1,/^spin: trail ends/p' "$trail" | grep -v '^spin: trail ends' | sed 's/^/   /' || true
	echo "   ok: spin finds the $property violation (the trail above)"
}

spin -V
exhaustive two-jobs   -DNJ=2 -DMAXCLAIMS=3 -DMAXATT=2 -DMAXFAULTS=2 -DMAXCRASH=1
exhaustive one-job    -DNJ=1 -DMAXCLAIMS=5 -DMAXATT=3 -DMAXFAULTS=3 -DMAXCRASH=2
# Handlers that complete their job in their own transaction (JobCompleteTx).
exhaustive complete-tx -DCOMPLETE_TX -DNJ=1 -DMAXCLAIMS=4 -DMAXATT=3 -DMAXFAULTS=2 -DMAXCRASH=1

# G3 assertions compare the statement's (ghost) lease with the row's current one,
# gl[j]; G2 ones use g2done (at a claim) or g2l (at Stop's return); KEEP's reads
# lfault (an outcome found stale or abandoned with no fault of its worker).
broken NO_FENCE          G3   '== *gl\[j\]'
broken NO_FENCE_COMPLETE G3   '== *gl\[j\]'
broken NO_RENEW_FENCE    G3   '== *gl\[j\]'
broken NO_TOKEN_BUMP     G3   '== *gl\[j\]'
broken NO_DRAIN          G2   'g2'
broken STOP_NIL_ON_LOST  G2   'g2'
broken HB_STOP_EARLY     KEEP 'lfault'
broken NO_TX_FENCE       G3   '== *gl\[j\]' -DCOMPLETE_TX

# The global limit of a queue (model/limit.pml, docs/design/flow-control.md, G11): the
# claim as weir runs it, then the two ways of getting it wrong.
model="$here/limit.pml"
exhaustive limit-3-jobs -DNJ=3
exhaustive limit-4-jobs -DNJ=4
broken NO_LOCK     G11 'hrun'
broken STALE_COUNT G11 'hrun'

# Shares of a global limit (model/share.pml, migration 015): clients holding
# shares beside clients claiming under the count, with crashes, lapses and
# expiries; then the four ways of getting it wrong. Two clients, two jobs and
# a limit of 1: some 39 million states, compressed.
model="$here/share.pml"
pan_cflags="-DCOLLAPSE"
# Its violations lie millions of states deep: an optimized verifier, and the
# first trail found rather than a shortest one.
broken_cflags="-O2"
broken_pan="-m10000 -w26"
exhaustive share-2-clients -DNC=2 -DNJ=2 -DLIMIT=1
broken NO_KEEP      G11 'hrun' -DNC=2 -DNJ=2 -DLIMIT=1
broken KEEP_RUNNING G11 'hrun' -DNC=2 -DNJ=2 -DLIMIT=1
broken EARLY_EXPIRY G11 'hrun' -DNC=2 -DNJ=2 -DLIMIT=1
broken NO_LEGACY    G11 'hrun' -DNC=2 -DNJ=2 -DLIMIT=1

# Shares of a queue's keys (model/keyshare.pml, migration 016): clients
# holding the key's bucket beside clients claiming under the count, with a
# crash, lapses, expiries and failed renewals; then the five ways of getting
# it wrong. Two clients and one key: two jobs under a limit of 1 (some
# 780,000 states), three under a limit of 2 (some 4.5 million).
model="$here/keyshare.pml"
pan_cflags=""
# Its violations lie some 40 to 60 steps deep in searches of a few million
# states: a breadth-first search (-DBFS) finds a shortest trail in about a
# second, where iterative shortening (-i) ran 15 minutes on the first variant
# without finishing.
broken_cflags="-O2 -DBFS"
broken_pan="-m10000 -w22"
exhaustive keyshare-2-jobs -DNC=2 -DNJ=2 -DLIMIT=1
exhaustive keyshare-3-jobs -DNC=2 -DNJ=3 -DLIMIT=2
broken NO_BUSY            G11 'hrun' -DNC=2 -DNJ=2 -DLIMIT=1
broken COUNTED_TAKES_HELD G11 'hrun' -DNC=2 -DNJ=2 -DLIMIT=1
broken START_UNHELD       G11 'hrun' -DNC=2 -DNJ=2 -DLIMIT=1
broken TRUST_PAST_EXPIRY  G11 'hrun' -DNC=2 -DNJ=2 -DLIMIT=1
broken NO_LOCAL_LIMIT     G11 'hrun' -DNC=2 -DNJ=2 -DLIMIT=1

# The ready list's mode (model/ready.pml, docs/design/storage.md): writers,
# a job made available again and claims, beside two leaders turning the list
# on and off; then the five ways of getting it wrong. The model's claim takes
# its write lock on weir_job before it reads the mode; weir_ready_claim, as
# this model was written, reads it first, which is CLAIM_READ_FIRST (see
# docs/design/model.md). Two jobs and one claimer (some 16 million states,
# 1.6 GB, about 30 s), then one job and two claimers (2.4 million).
model="$here/ready.pml"
pan_cflags=""
# Its violations lie up to 30 events deep: a breadth-first search finds a
# shortest trail, with one job and one claimer, in seconds.
broken_cflags="-O2 -DBFS"
broken_pan="-m10000 -w22"
exhaustive ready-2-jobs     -DNJ=2 -DNC=1 -DMAXCLAIMS=2
exhaustive ready-2-claimers -DNJ=1 -DNC=2 -DMAXCLAIMS=1
broken NO_WAIT          G1 'mode!=2' -DNJ=1 -DNC=1 -DMAXCLAIMS=2
broken LOCK_AFTER_READ  G1 'mode!=2' -DNJ=1 -DNC=1 -DMAXCLAIMS=2
broken NO_RECHECK       G1 'mode!=2' -DNJ=1 -DNC=1 -DMAXCLAIMS=2
broken CLAIM_READ_FIRST G1 'mode!=2' -DNJ=1 -DNC=1 -DMAXCLAIMS=2
broken CLEAR_UNCHECKED  G1 'mode!=2' -DNJ=1 -DNC=1 -DMAXCLAIMS=2

if [ "$fail" -ne 0 ]; then
	echo "model/check.sh: FAILED" >&2
	exit 1
fi
echo "model/check.sh: all checks passed"
