/*
 * model/ready.pml: the ready list's mode (docs/design/storage.md, The list on
 * demand). Writers commit jobs, and a claimed job may be made available
 * again (a return); claims take jobs through the job table's index or
 * through the ready list; two leaders turn the list on and off. The
 * property: no job is stranded. Whenever the mode is on, every committed
 * available job has a row in the list, so that a claim walking the list can
 * find it. It is asserted after every step that changes the mode, a job or a
 * row, and once more at the end: with everything done and the list on, a
 * claim walking the list takes every available job.
 *
 * What is modelled of the database:
 * - The mode's value, weir_ready_mode: gen*4 + mode in weir; here gen counts
 *   the writes, so a leader that finds the gen it read knows nobody wrote
 *   since. A read sees the last write at once (a sequence is not
 *   versioned), also in a transaction that began before it.
 * - Each transaction under the mode's advisory lock X is one step: it reads
 *   the value again and writes it (or repairs, or empties the list) only if
 *   it is the one expected. X serializes them and only they write the
 *   value, so it cannot change during one; the repair reads the jobs and
 *   rows on one snapshot, and the rows it adds matter only once claims walk
 *   the list, which takes a later write.
 * - Each job's committed state, and its committed rows in the list, a bit
 *   each, so that a claim deletes the very rows it saw. A row is a hint:
 *   one whose job is not available is stale.
 * - The write lock on weir_job (RowExclusiveLock) of each transaction:
 *   lk[p] is the transaction of process p that holds it, numbered so that
 *   no later one has the same number (a virtual transaction id).
 *
 * Writers: a transaction takes its write lock on weir_job and writes the
 * job (an insert, or an update making it available; nobody sees it before
 * the commit); at the end of the statement its trigger reads the mode, and
 * on 1 or 2 writes the job's row. It commits (the job and its row seen
 * together) or aborts (neither). Up to MAXRET claimed jobs in all are made
 * available again so (OutcomeReturn, a release).
 *
 * Claims: a claim takes its write lock on weir_job, then reads the mode. On
 * 2, it takes a snapshot, then deletes any of the rows it saw that are still
 * there and claims each of their jobs that was available on its snapshot
 * and still is (a stale row is deleted and skipped). Otherwise it claims an
 * available job through the index. The deletes, the claims and the commit
 * are one step: only other claims would see the rows in between, and they
 * skip rows locked (SKIP LOCKED).
 *
 * Leaders: the leader, and the old term's leader, which takes one step at
 * any time (a deposed leader finishes the step it is in; a client setting a
 * key limit turns the list on the same way). A leader reads the value
 * without X, then acts under X if the value is still the one read; when it
 * is, the two are one step here (when it is not, the leader does nothing):
 * - off: turn on. Write 1; list the transactions holding a write lock on
 *   weir_job; wait until each has ended; under X, if the value is still the
 *   one written, add a row for every available job without one (the
 *   repair), and commit; under X, if it still is, write 2.
 * - off: or empty the list (TRUNCATE), if the mode read under X is off.
 *   TRUNCATE waits, holding X, for the transactions holding locks on the
 *   list (uncommitted rows, claims walking it); here it happens once none
 *   does.
 * - writing: finish turning on from the value read: the list of lock
 *   holders, the wait, the repair, on.
 * - on: turn off: write 0.
 * The mode is written at most MAXW times in all; it starts off (a new
 * schema) or on (a migrated one).
 *
 * Broken variants (model/check.sh), each of which spin must catch:
 *   NO_WAIT          the leader repairs without waiting for the transactions
 *                    that held a write lock on weir_job.
 *   LOCK_AFTER_READ  a writer reads the mode before it takes its write lock on
 *                    weir_job.
 *   NO_RECHECK       the leader writes 2 without checking that the value is
 *                    still the one it wrote as 1.
 *   CLAIM_READ_FIRST a claim reads the mode before it takes its write lock on
 *                    weir_job, as weir_ready_claim's first version did (in
 *                    its declarations): the hole this model found in weir
 *                    (docs/design/model.md).
 *   CLEAR_UNCHECKED  the leader empties the list on the mode it read before,
 *                    without reading it again under X.
 */

#ifndef NJ
#define NJ 2        /* jobs, each with its writer; at most 3 */
#endif
#ifndef NC
#define NC 1        /* claimers; NJ + NC at most 6 */
#endif
#ifndef MAXCLAIMS
#define MAXCLAIMS 2 /* claims of each claimer */
#endif
#ifndef MAXRET
#define MAXRET 1    /* jobs made available again, in all */
#endif
#ifndef MAXW
#define MAXW 5      /* writes of the mode, in all: from off, on, off, on */
#endif

#define NONE    0   /* not committed (yet, or ever) */
#define AVAIL   1
#define RUNNING 2

#define MAXP 6      /* processes that take weir_job's write lock: writers 0..NJ-1, claimers NJ.. */

byte gen = 0;       /* the mode's value: the writes so far ... */
byte mode = 0;      /* ... and the mode: 0 off, 1 writing, 2 on */
byte st[NJ];        /* the job rows, committed */
byte rows[NJ];      /* the job's rows in the list, committed, a bit each */
byte snap[NC*NJ];   /* the rows of job j on claimer c's snapshot (at c*NJ+j) */
byte sav[NC];       /* the jobs available on claimer c's snapshot, a bit each */
byte lk[MAXP];      /* the transaction of process p that holds its write lock on weir_job, 0: none */
byte pend = 0;      /* rows written, not yet committed */
byte walking = 0;   /* claims walking the list (from their snapshot to their commit) */
byte rets = 0;      /* jobs made available again */

#define STRANDED(j) (st[j] == AVAIL && rows[j] == 0)
#define NOSTRAND (mode != 2 || !(STRANDED(0) || (NJ > 1 && STRANDED(1)) || (NJ > 2 && STRANDED(2))))

/* Job j's new row, committed: its bit is the first that names none of its
 * rows, in the list or on a claim's snapshot. */
inline addrow(j) {
	b = rows[j];
	for (c : 0 .. NC-1) {
		b = b | snap[c*NJ+j]
	};
	c = 1;
	do
	:: (b & c) != 0 -> c = c << 1
	:: else -> break
	od;
	assert(c != 0); /* at most 8 rows of a job at once */
	rows[j] = rows[j] | c;
	b = 0; c = 0
}

inline wrote(j) {
	if
	:: t == 1 -> printf("w%d: takes its write lock, inserts job %d\n", j, j)
	:: else -> printf("w%d: takes its write lock, makes job %d available again\n", j, j)
	fi
}

/* Writer j: a transaction makes job j available (an insert, then updates
 * of the job once claimed), or aborts. */
proctype writer(byte j) {
	byte t = 0; /* its transactions so far */
	bool row;   /* its trigger wrote the job's row */
	byte b, c;

	do
	:: atomic {
		t == 0 || st[j] == RUNNING && rets < MAXRET ->
		if
		:: t > 0 -> rets++
		:: else -> skip
		fi;
		t++;
#ifdef LOCK_AFTER_READ
		row = (mode == 1 || mode == 2);
		printf("w%d: reads mode %d\n", j, mode)
	};
	atomic {
		lk[j] = t;
		wrote(j);
#else
		/* The statement takes its lock and writes the job. */
		lk[j] = t;
		wrote(j)
	};
	atomic {
		/* Its trigger reads the mode. */
		row = (mode == 1 || mode == 2);
		printf("w%d: its trigger reads mode %d\n", j, mode);
#endif
		if
		:: row -> pend++; printf("w%d: writes a row of job %d\n", j, j)
		:: else -> skip
		fi
	};
	atomic {
		if
		:: st[j] = AVAIL;
			if
			:: row -> addrow(j)
			:: else -> skip
			fi;
			printf("w%d: commits: job %d available, its rows %d\n", j, j, rows[j])
		:: printf("w%d: aborts\n", j) /* neither the job nor its row */
		fi;
		if
		:: row -> pend--
		:: else -> skip
		fi;
		lk[j] = 0; row = false;
		assert(NOSTRAND)
	}
	:: t > 0 -> break
	od
}

/* Claimer c's claim walking the list, for job j: of the rows of j it saw
 * that are still there, it deletes any, and claims j if j was available on
 * its snapshot and still is. */
inline walk(j) {
	for (k : 0 .. 7) {
		if
		:: (snap[c*NJ+j] & rows[j] & (1 << k)) != 0 ->
			rows[j] = rows[j] & ~(1 << k);
			if
			:: (sav[c] & (1 << j)) != 0 && st[j] == AVAIL ->
				st[j] = RUNNING;
				printf("c%d: deletes a row of job %d, claims job %d\n", c, j, j)
			:: else ->
				printf("c%d: deletes a row of job %d, stale on its snapshot\n", c, j)
			fi
		:: true -> skip
		fi
	};
	k = 0
}

proctype claimer(byte p) {
	byte c = p - NJ; /* its place among the claimers */
	byte t = 0, m, j, k;

	do
	:: atomic {
		t < MAXCLAIMS ->
		t++;
#ifndef CLAIM_READ_FIRST
		lk[p] = t;
		printf("c%d: takes its write lock\n", c);
#endif
		m = mode;
		printf("c%d: claim reads mode %d\n", c, m)
	};
		if
		:: m == 2 ->
			atomic {
#ifdef CLAIM_READ_FIRST
				lk[p] = t;
				printf("c%d: takes its write lock\n", c);
#endif
				for (j : 0 .. NJ-1) {
					snap[c*NJ+j] = rows[j];
					if
					:: st[j] == AVAIL -> sav[c] = sav[c] | (1 << j)
					:: else -> skip
					fi;
					if
					:: st[j] == AVAIL -> printf("c%d: its snapshot: job %d available, its rows %d\n", c, j, rows[j])
					:: st[j] == RUNNING -> printf("c%d: its snapshot: job %d claimed, its rows %d\n", c, j, rows[j])
					:: else -> skip
					fi
				};
				walking++; j = 0; m = 0
			};
			atomic {
				for (j : 0 .. NJ-1) {
					walk(j);
					snap[c*NJ+j] = 0
				};
				walking--; lk[p] = 0; sav[c] = 0; j = 0; k = 0;
				printf("c%d: commits\n", c);
				assert(NOSTRAND)
			}
		:: else ->
			/* Through the index, which is always whole. */
			atomic {
				lk[p] = t;
				if
				:: st[0] == AVAIL -> j = 0
				:: NJ > 1 && st[1] == AVAIL -> j = 1
				:: NJ > 2 && st[2] == AVAIL -> j = 2
				:: else -> j = NJ /* none */
				fi;
				if
				:: j < NJ -> st[j] = RUNNING; printf("c%d: claims job %d through the index\n", c, j)
				:: else -> skip
				fi;
				lk[p] = 0; j = 0; m = 0
			}
		fi
	:: else -> break
	od
}

/* Finish turning on from the value written as 1 (gen g). */
inline turnon() {
#ifndef NO_WAIT
	/* The transactions that hold a write lock on weir_job now, after the
	 * write of 1; then wait until each has ended. */
	d_step {
		for (k : 0 .. MAXP-1) {
			lst[k] = lk[k]
		};
		printf("L%d: lists the lock holders\n", me);
		for (k : 0 .. MAXP-1) {
			if
			:: lst[k] != 0 && k < NJ -> printf("L%d:   w%d (its transaction %d)\n", me, k, lst[k])
			:: lst[k] != 0 && k >= NJ -> printf("L%d:   c%d (its transaction %d)\n", me, k - NJ, lst[k])
			:: else -> skip
			fi
		};
		k = 0
	};
	atomic {
		(lst[0] == 0 || lk[0] != lst[0]) && (lst[1] == 0 || lk[1] != lst[1]) &&
		(lst[2] == 0 || lk[2] != lst[2]) && (lst[3] == 0 || lk[3] != lst[3]) &&
		(lst[4] == 0 || lk[4] != lst[4]) && (lst[5] == 0 || lk[5] != lst[5]) ->
		for (k : 0 .. MAXP-1) {
			lst[k] = 0
		};
		k = 0;
		printf("L%d: they have ended\n", me)
	};
#endif
	/* The repair, under X, if the value is still g. */
	atomic {
		if
		:: gen == g ->
			for (j : 0 .. NJ-1) {
				if
				:: st[j] == AVAIL && rows[j] == 0 ->
					addrow(j);
					printf("L%d: repair: adds a row of job %d\n", me, j)
				:: else -> skip
				fi
			};
			j = 0; ok = true;
			printf("L%d: repair commits\n", me)
		:: else -> g = 0; printf("L%d: repair: the value moved, stops\n", me)
		fi
	};
	/* On, under X, if the value is still g. */
	atomic {
		if
#ifdef NO_RECHECK
		:: ok && gen < MAXW -> gen++; mode = 2; printf("L%d: writes mode 2 (value %d)\n", me, gen)
#else
		:: ok && gen == g && gen < MAXW -> gen++; mode = 2; printf("L%d: writes mode 2 (value %d)\n", me, gen)
#endif
		:: else -> skip
		fi;
		g = 0; ok = false;
		assert(NOSTRAND)
	}
}

proctype leader(byte me) {
	byte g, j, k, b, c;
	byte lst[MAXP]; /* the lock holders it waits for */
	bool ok;

end:
	do
	:: if
		/* Turn on: write 1, and finish. */
		:: atomic {
			mode == 0 && gen < MAXW -> gen++; mode = 1; g = gen;
			printf("L%d: writes mode 1 (value %d)\n", me, gen)
		};
			turnon()
		/* Finish turning on from the value read. */
		:: atomic { mode == 1 -> g = gen; printf("L%d: reads mode 1 (value %d)\n", me, gen) };
			turnon()
		/* Turn off. */
		:: atomic {
			mode == 2 && gen < MAXW -> gen++; mode = 0;
			printf("L%d: writes mode 0 (value %d)\n", me, gen);
			assert(NOSTRAND)
		}
		/* Empty the list once nobody holds a lock on it, if the mode read
		 * under X is off. */
#ifdef CLEAR_UNCHECKED
		:: atomic { mode == 0 -> printf("L%d: reads mode 0\n", me) }; /* not under X */
			atomic {
				pend == 0 && walking == 0 ->
#else
		:: atomic {
				mode == 0 && pend == 0 && walking == 0 ->
#endif
				for (j : 0 .. NJ-1) {
					rows[j] = 0
				};
				j = 0;
				printf("L%d: empties the list\n", me);
				assert(NOSTRAND)
			}
		fi;
		/* The old term's leader takes one step. */
		if
		:: me == 2 -> break
		:: else -> skip
		fi
	:: break
	od
}

init {
	byte j;
	atomic {
		if
		:: mode = 0 /* a new schema */
		:: mode = 2 /* a migrated one */
		fi;
		printf("mode %d\n", mode);
		run leader(1);
		run leader(2);
		for (j : 0 .. NJ-1) {
			run writer(j)
		};
		for (j : 0 .. NC-1) {
			run claimer(NJ + j)
		};
		j = 0
	};
	/* Everything done: with the list on, a claim walking it takes every
	 * available job. */
	_nr_pr == 1;
	atomic {
		if
		:: mode == 2 ->
			for (j : 0 .. NJ-1) {
				if
				:: rows[j] != 0 && st[j] == AVAIL -> st[j] = RUNNING
				:: else -> skip
				fi;
				rows[j] = 0;
				assert(st[j] != AVAIL)
			}
		:: else -> skip
		fi
	}
}
