/*
 * model/share.pml: a queue's global limit kept by shares (docs/design/flow-control.md,
 * G11). NC clients run jobs of one queue limited to LIMIT. A
 * client that holds a share claims jobs without the limit's count and starts
 * handlers only within its share's fair part; a client without one (one that
 * has not asked yet) claims under the queue's lock, counted
 * against the live shares and the running jobs of clients without one, and
 * asks for a share when such a claim is cut short. Shares are leased: a
 * client trusts its share until its lease budget runs out (a lapse), and the
 * database treats a share as gone only after that (an expiry). Clients crash
 * (SIGKILL: their handlers die, their leases and shares stay until they run
 * out); a rescuer takes back the jobs of crashed clients. The property: at no
 * instant do more than LIMIT handlers run (the handlers' own count, hrun),
 * checked at every handler start.
 *
 * The renewal (QueueShare), as weir runs it: the client notes what it may be
 * using until the answer (keep: its handlers, or its fair part while its share
 * is trusted, since handlers may start up to it meanwhile) and sends; the
 * database takes the queue's lock, reads on a snapshot taken then the other
 * live shares and the running jobs of clients without one, writes the share as
 * the client's fair part within the room left but never less than keep, and
 * commits; the answer sets the client's fair part, trusted for the send's
 * window. Everything with equal wants, so that a fair part is LIMIT divided
 * among the live shares and the asker, the remainder to the first by id.
 *
 * Broken variants (model/check.sh), each of which spin must catch:
 *   NO_KEEP       the share written is the fair part alone, below the handlers
 *                 the client may be running.
 *   KEEP_RUNNING  keep counts the handlers running only, not those the client
 *                 may start before the answer.
 *   EARLY_EXPIRY  the database treats a share as gone while its client still
 *                 trusts it (a lease shorter than the client's budget).
 *   NO_LEGACY     a renewal does not count the running jobs of clients without
 *                 a live share.
 */

#ifndef NC
#define NC 3
#endif
#ifndef NJ
#define NJ 3
#endif
#ifndef LIMIT
#define LIMIT 2
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXLAPSE
#define MAXLAPSE 2
#endif
#ifndef MAXGIVEUP
#define MAXGIVEUP 1
#endif

/* Whether client me may start a handler: within its share's fair part while
 * it trusts it; without a share, on any leased job (the claim counted it). */
#define CANSTART (!crashed[me] && (!on[me] || (tw[me] && hc[me] < fair[me])))

#define AVAIL   0
#define RUNNING 1
#define DONE    2

/* The database. */
byte state[NJ];    /* the job rows */
byte token[NJ];    /* their lease tokens */
byte owner[NJ];    /* the client that holds the lease, 1..NC */
bool live[NC+1];   /* the client's share row exists and has not expired */
byte slots[NC+1];  /* its slots */

/* The clients, as the other processes need to see them. */
bool crashed[NC+1];
bool on[NC+1];     /* keeps its handlers within a share */
byte fair[NC+1];   /* its share's fair part: the handlers it may run */
bool tw[NC+1];     /* the window of its last answered renewal is open: it trusts the share */
bool pw[NC+1];     /* the window of its renewal in flight is open */
bool rowpw[NC+1];  /* the share row's last write is the renewal in flight's */
byte hc[NC+1];     /* its handlers running */
byte mine[(NC+1)*NJ]; /* the lease token client c holds on job j (at c*NJ+j), 0: none */
byte crashes = 0;
byte lapses = 0;

/* Ghost: the handlers running, all clients together, and per job. */
byte hrun = 0;
bool hr[NJ];

/* A renewal's read and write, on one snapshot under the lock: me's share
 * becomes its fair part within the room the others leave, at least keep. */
inline divide(me, keep, f) {
	d_step {
		others = 0; legacy = 0; k = 1; rank = 0;
		for (c : 1 .. NC) {
			if
			:: c != me && live[c] -> others = others + slots[c]; k++;
				if
				:: c < me -> rank++
				:: else -> skip
				fi
			:: else -> skip
			fi
		};
		for (i : 0 .. NJ-1) {
			if
			:: state[i] == RUNNING && owner[i] != me && !live[owner[i]] -> legacy++
			:: else -> skip
			fi
		};
#ifdef NO_LEGACY
		legacy = 0;
#endif
		f = LIMIT / k + (rank < LIMIT % k -> 1 : 0);
		if
		:: others + legacy >= LIMIT -> f = 0
		:: others + legacy < LIMIT && f > LIMIT - others - legacy -> f = LIMIT - others - legacy
		:: else -> skip
		fi;
#ifdef NO_KEEP
		slots[me] = f;
#else
		slots[me] = (f > keep -> f : keep);
#endif
		live[me] = true;
		rowpw[me] = true;
		others = 0; legacy = 0; k = 0; rank = 0; c = 0; i = 0
	}
}

proctype client(byte me) {
	byte keep, f, busy, room, j, c, i, k, rank, others, legacy;
	bool giveups;

end:
	do
	/* Claim. A client holding a live share leases every available job
	 * without a count (its handlers stay within its share): the share read,
	 * then the leases committed, two steps. One without leases, under the
	 * queue's lock, at most the limit less the live shares and the running
	 * jobs of clients without one: one step, since under the lock no other
	 * counting writer runs, and what runs beside it (outcomes, rescues, share
	 * holders' claims) adds nothing that the other counting writers would
	 * not see in turn (docs/design/flow-control.md). */
	:: !crashed[me] && live[me] ->
		/* The share read, then the leases committed: the share may run out
		 * in between, and another client count before they commit. */
		atomic {
			for (j : 0 .. NJ-1) {
				if
				:: state[j] == AVAIL && !crashed[me] ->
					state[j] = RUNNING; token[j]++; owner[j] = me; mine[me*NJ+j] = token[j]
				:: else -> skip
				fi
			};
			j = 0
		}
	:: atomic {
		!crashed[me] && !live[me] ->
		busy = 0;
		for (c : 1 .. NC) {
			if
			:: live[c] -> busy = busy + slots[c]
			:: else -> skip
			fi
		};
		for (i : 0 .. NJ-1) {
			if
			:: state[i] == RUNNING && !live[owner[i]] -> busy++
			:: else -> skip
			fi
		};
		room = (busy < LIMIT -> LIMIT - busy : 0);
		for (j : 0 .. NJ-1) {
			if
			:: room > 0 && state[j] == AVAIL ->
				state[j] = RUNNING; token[j]++; owner[j] = me; mine[me*NJ+j] = token[j]; room--
			:: else -> skip
			fi
		};
		/* Cut short by the limit: keep within a share from now on,
		 * starting nothing more until the first renewal answers. */
		if
		:: busy >= LIMIT && !on[me] -> on[me] = true; fair[me] = hc[me]; tw[me] = true
		:: else -> skip
		fi;
		busy = 0; room = 0; j = 0; c = 0; i = 0
	}
	/* Renew the share: send (what it may use until the answer); the
	 * database's transaction under the lock, one step as the claim's; the
	 * answer. Handlers start between them, within the fair part held. */
	:: atomic {
		!crashed[me] && on[me] && !pw[me] ->
#ifdef KEEP_RUNNING
		keep = hc[me];
#else
		keep = (tw[me] && fair[me] > hc[me] -> fair[me] : hc[me]);
#endif
		pw[me] = true
	};
	if
	:: crashed[me] -> skip
	:: else -> divide(me, keep, f)
	fi;
	atomic {
		if
		:: !crashed[me] -> fair[me] = f; tw[me] = pw[me]; pw[me] = false; rowpw[me] = false
		:: else -> skip
		fi;
		keep = 0; f = 0
	}
	/* Stop: with no handler running, the share is given up, and the client
	 * starts nothing more (its buffered jobs, claimed without the count, were
	 * given back); were it to claim again, it would renew first. */
	:: atomic {
		!crashed[me] && on[me] && hc[me] == 0 && !pw[me] && !giveups ->
		live[me] = false; tw[me] = false; fair[me] = 0; giveups = true
	}
	:: crashed[me] -> break
	od
}

/* Client me's handlers, beside its claims and renewals (in weir, worker
 * goroutines beside the producer's loop and its share loop). */
proctype handlers(byte me) {
	byte j;
end:
	do
	/* Start a handler of a job this client leased: within the share's fair
	 * part while it is trusted; without a share, any leased job (the claim
	 * counted it). */
	:: atomic {
		if
		:: CANSTART && mine[me*NJ+0] == token[0] && owner[0] == me && state[0] == RUNNING && !hr[0] -> j = 0
		:: CANSTART && NJ > 1 && mine[me*NJ+1] == token[1] && owner[1] == me && state[1] == RUNNING && !hr[1] -> j = 1
		:: CANSTART && NJ > 2 && mine[me*NJ+2] == token[2] && owner[2] == me && state[2] == RUNNING && !hr[2] -> j = 2
		:: CANSTART && NJ > 3 && mine[me*NJ+3] == token[3] && owner[3] == me && state[3] == RUNNING && !hr[3] -> j = 3
		fi;
		hr[j] = true; hc[me]++; hrun++;
		assert(hrun <= LIMIT);
		j = 0
	}
	/* A handler returns, and its outcome is written, fenced by the token. */
	:: atomic {
		if
		:: !crashed[me] && mine[me*NJ+0] == token[0] && owner[0] == me && hr[0] -> j = 0
		:: !crashed[me] && NJ > 1 && mine[me*NJ+1] == token[1] && owner[1] == me && hr[1] -> j = 1
		:: !crashed[me] && NJ > 2 && mine[me*NJ+2] == token[2] && owner[2] == me && hr[2] -> j = 2
		:: !crashed[me] && NJ > 3 && mine[me*NJ+3] == token[3] && owner[3] == me && hr[3] -> j = 3
		fi;
		hr[j] = false; hc[me]--; hrun--;
		/* No lease of a running handler is rescued (see limit.pml), so the
		 * fenced write finds its lease. */
		assert(state[j] == RUNNING && token[j] == mine[me*NJ+j]);
		state[j] = DONE; mine[me*NJ+j] = 0; j = 0
	}
	:: crashed[me] -> break
	od
}

/* SIGKILL of one client: its handlers die with it; its leases and its share
 * stay until they run out. */
active proctype killer() {
	byte c, j;
	do
	:: atomic {
		crashes < MAXCRASH ->
		if
		:: !crashed[1] -> c = 1
		:: NC > 1 && !crashed[2] -> c = 2
		:: NC > 2 && !crashed[3] -> c = 3
		fi;
		crashed[c] = true; crashes++;
		for (j : 0 .. NJ-1) {
			if
			:: hr[j] && owner[j] == c -> hr[j] = false; hrun--
			:: else -> skip
			fi
		};
		hc[c] = 0; tw[c] = false; pw[c] = false;
		c = 0; j = 0
	}
	:: crashes >= MAXCRASH -> break
	od
}

/* Time: a client's trusted window closes (its renewals did not get through
 * within the lease budget; the window of a renewal in flight closes after
 * the one before it); a share row whose backing window closed may expire.
 * The rescue: a lease whose handler is not running and whose client crashed
 * may expire, and the job becomes available again. */
active proctype clock() {
	byte c, j;
end:
	do
	:: atomic {
		lapses < MAXLAPSE ->
		if
		:: tw[1] -> c = 1
		:: NC > 1 && tw[2] -> c = 2
		:: NC > 2 && tw[3] -> c = 3
		fi;
		tw[c] = false; lapses++; c = 0
	}
	:: atomic {
		lapses < MAXLAPSE ->
		if
		:: pw[1] && !tw[1] -> c = 1
		:: NC > 1 && pw[2] && !tw[2] -> c = 2
		:: NC > 2 && pw[3] && !tw[3] -> c = 3
		fi;
		pw[c] = false; lapses++; c = 0
	}
	:: atomic {
		if
#ifdef EARLY_EXPIRY
		:: live[1] -> c = 1
		:: NC > 1 && live[2] -> c = 2
		:: NC > 2 && live[3] -> c = 3
#else
		:: live[1] && (rowpw[1] -> !pw[1] : !tw[1]) -> c = 1
		:: NC > 1 && live[2] && (rowpw[2] -> !pw[2] : !tw[2]) -> c = 2
		:: NC > 2 && live[3] && (rowpw[3] -> !pw[3] : !tw[3]) -> c = 3
#endif
		fi;
		live[c] = false; c = 0
	}
	:: atomic {
		if
		:: state[0] == RUNNING && !hr[0] && crashed[owner[0]] -> j = 0
		:: NJ > 1 && state[1] == RUNNING && !hr[1] && crashed[owner[1]] -> j = 1
		:: NJ > 2 && state[2] == RUNNING && !hr[2] && crashed[owner[2]] -> j = 2
		:: NJ > 3 && state[3] == RUNNING && !hr[3] && crashed[owner[3]] -> j = 3
		fi;
		state[j] = AVAIL; j = 0
	}
	od
}

init {
	byte c;
	atomic {
		/* Client 1 declares the limit: it keeps within a share from the
		 * start, starting nothing before its first renewal. The others learn
		 * of the limit from a claim it cuts short. */
		on[1] = true; tw[1] = true;
		for (c : 1 .. NC) {
			run client(c);
			run handlers(c)
		}
	}
}
