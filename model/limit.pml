/*
 * model/limit.pml: a queue's global limit (docs/design/flow-control.md, G11), as the
 * claim enforces it: NC clients claim jobs of one queue limited to LIMIT, run
 * handlers, write fenced outcomes, crash; a rescuer takes back the jobs of
 * crashed clients. The property: at no instant do more than LIMIT handlers
 * run (the handlers' own count, hrun), checked at every handler start.
 *
 * What is modelled of the database: each job's state and lease token, and the
 * queue's claim lock (a transaction-level advisory lock). A claim is three
 * steps, as weir_ready_claim runs them: take the lock (waiting while another
 * claim holds it); count the running jobs on a snapshot taken then; lease up
 * to LIMIT less that count of available jobs and commit, which releases the
 * lock. Between the count and the commit other clients' outcomes and rescues
 * go on (they only lower the count). A job's lease is rescued only while no
 * handler of it runs and its client has crashed or given the lease up: a
 * client stops trusting a lease (and ends its handler's context) before the
 * database could expire it (the lease budget), handlers return when their
 * context ends, and a crash ends them all. At most 4 jobs (the selections
 * below are written out).
 *
 * Broken variants (model/check.sh), each of which spin must catch:
 *   NO_LOCK      the claim takes no lock: two claims count the same slots.
 *   STALE_COUNT  the count's snapshot is taken before the lock is granted, as
 *                one statement that locked and counted would take it.
 */

#ifndef NC
#define NC 3
#endif
#ifndef NJ
#define NJ 4
#endif
#ifndef LIMIT
#define LIMIT 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXGIVEUP
#define MAXGIVEUP 1
#endif

#define AVAIL   0
#define RUNNING 1
#define DONE    2

byte state[NJ];    /* the job rows */
byte token[NJ];    /* their lease tokens */
byte owner[NJ];    /* the client that holds the lease, 1..NC */
byte lockq = 0;    /* the queue's claim lock: 0, or the client that holds it */
bool crashed[NC+1];
byte crashes = 0;
bool gaveup[NJ];   /* the lease's client gave it up: the rescue may take it */
byte giveups = 0;

/* Ghost: the handlers running, all clients together, and per job. */
byte hrun = 0;
bool hr[NJ];

/* The count, on one snapshot: one indivisible step. */
inline count_running(n) {
	d_step {
		n = 0;
		for (k : 0 .. NJ-1) {
			if
			:: state[k] == RUNNING -> n++
			:: else -> skip
			fi
		};
		k = 0
	}
}

proctype client(byte me) {
	byte busy, room, j, k;
	byte mine[NJ]; /* the lease token this client holds on each job, 0: none */
	bool running[NJ];

end:
	do
	/* Claim. */
	:: !crashed[me] ->
#ifdef STALE_COUNT
		count_running(busy);
#endif
#ifndef NO_LOCK
		atomic { lockq == 0 && !crashed[me] -> lockq = me };
#endif
#if !defined(STALE_COUNT)
		count_running(busy);
#endif
		atomic {
			room = (busy < LIMIT -> LIMIT - busy : 0);
			for (j : 0 .. NJ-1) {
				if
				:: room > 0 && state[j] == AVAIL ->
					state[j] = RUNNING; token[j]++; owner[j] = me; gaveup[j] = false;
					mine[j] = token[j]; room--
				:: else -> skip
				fi
			}
#ifndef NO_LOCK
			lockq = 0;
#endif
			busy = 0; room = 0; j = 0 /* dead from here: not state */
		}
	/* Start a handler of a job this client leased. */
	:: atomic {
		if
		:: !crashed[me] && mine[0] != 0 && !running[0] -> j = 0
		:: !crashed[me] && NJ > 1 && mine[1] != 0 && !running[1] -> j = 1
		:: !crashed[me] && NJ > 2 && mine[2] != 0 && !running[2] -> j = 2
		:: !crashed[me] && NJ > 3 && mine[3] != 0 && !running[3] -> j = 3
		fi;
		running[j] = true; hr[j] = true; hrun++;
		assert(hrun <= LIMIT);
		j = 0
	}
	/* A handler returns, and its outcome is written, fenced by the token. */
	:: atomic {
		if
		:: !crashed[me] && running[0] -> j = 0
		:: !crashed[me] && NJ > 1 && running[1] -> j = 1
		:: !crashed[me] && NJ > 2 && running[2] -> j = 2
		:: !crashed[me] && NJ > 3 && running[3] -> j = 3
		fi;
		running[j] = false; hr[j] = false; hrun--
	}
	atomic {
		/* No lease of a running handler is rescued here (see the top), so
		 * the fenced write always finds its lease. */
		assert(state[j] == RUNNING && token[j] == mine[j]);
		state[j] = DONE; mine[j] = 0; j = 0
	}
	/* The client stops trusting a lease it has not started (its renewal
	 * failed): it drops the job, and the rescue may take it. */
	:: atomic {
		if
		:: !crashed[me] && giveups < MAXGIVEUP && mine[0] != 0 && !running[0] -> j = 0
		:: !crashed[me] && giveups < MAXGIVEUP && NJ > 1 && mine[1] != 0 && !running[1] -> j = 1
		:: !crashed[me] && giveups < MAXGIVEUP && NJ > 2 && mine[2] != 0 && !running[2] -> j = 2
		:: !crashed[me] && giveups < MAXGIVEUP && NJ > 3 && mine[3] != 0 && !running[3] -> j = 3
		fi;
		mine[j] = 0; gaveup[j] = true; giveups++; j = 0
	}
	/* SIGKILL: the handlers die with the process; the leases stay. */
	:: atomic {
		!crashed[me] && crashes < MAXCRASH ->
		crashed[me] = true; crashes++;
		for (k : 0 .. NJ-1) {
			if
			:: running[k] -> running[k] = false; hr[k] = false; hrun--
			:: else -> skip
			fi
		};
		k = 0
	}
	:: crashed[me] -> break
	od
}

/* The maintenance leader: a lease whose handler is not running (its client
 * crashed, or it gave the lease up) may expire; the rescue makes the job
 * available again, which is when it stops counting. */
active proctype rescuer() {
	byte j;
end:
	do
	:: atomic {
		if
		:: state[0] == RUNNING && !hr[0] && (crashed[owner[0]] || gaveup[0]) -> j = 0
		:: NJ > 1 && state[1] == RUNNING && !hr[1] && (crashed[owner[1]] || gaveup[1]) -> j = 1
		:: NJ > 2 && state[2] == RUNNING && !hr[2] && (crashed[owner[2]] || gaveup[2]) -> j = 2
		:: NJ > 3 && state[3] == RUNNING && !hr[3] && (crashed[owner[3]] || gaveup[3]) -> j = 3
		fi;
		state[j] = AVAIL; j = 0
	}
	od
}

init {
	byte c;
	atomic {
		for (c : 1 .. NC) {
			run client(c)
		}
	}
}
