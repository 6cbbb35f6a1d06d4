/*
 * model/keyshare.pml: a queue's limit per key kept by shares of its keys
 * (docs/design/flow-control.md, How key shares keep them). NC
 * clients run the jobs of one key, limited to LIMIT running handlers; the
 * key's bucket is held by at most one client at a time in weir_key_share,
 * leased and renewed like a job's lease. The property: at no instant do more
 * than LIMIT handlers of the key run, all clients together (the handlers'
 * own count, hrun), checked at every handler start.
 *
 * Each client is three processes, as in weir three loops run beside each
 * other: its claims (the producer's loop), its renewals (the key loop,
 * KeyShare) and its handlers (the workers, startBufferedLocked).
 *
 * - The renewal, one transaction under the queue's claim lock: the
 *   client's row of the bucket is deleted if the client releases it, else
 *   extended; then, if no live row holds the bucket and no job of its key is
 *   leased (state running, by any client, started or not), the client may
 *   take it (whether its part is the bucket is left to spin). A row whose
 *   lease ran out (the clock below) is no row: the renewal deletes it first,
 *   and the claims read live rows only. The answer sets the client's held
 *   set and its trust, which lasts the window of the renewal's send (send
 *   time plus the lease budget), and may come after that window lapsed. A
 *   renewal may fail after it committed: the client keeps its held set and
 *   trust as they were. The client lets the bucket go when an answer says it
 *   holds more than its part: it stops holding it at once and releases it at
 *   its next renewal.
 * - The claim as holder, without the lock or a count: it reads the client's
 *   live row, then, in a second step (the row may run out in between, and
 *   another client take the bucket), leases available jobs of the bucket,
 *   any of them, into the client's buffer. It is taken whenever the row is
 *   the client's, whatever its held set says: weir sends the buckets it
 *   trusted when the claim began, and this covers them.
 * - The counted claim, one step under the claim lock: it counts the key's
 *   leased jobs and leases available jobs, any of them, while fewer than
 *   LIMIT are, passing over the key if a client holds its bucket (a live
 *   row, this client's own too). Any client may take it at any time (weir
 *   takes it when the client trusts no bucket, and this covers it).
 * - A buffered job claimed as holder starts only while the client holds its
 *   bucket, trusts its held set, and runs fewer than LIMIT handlers of the
 *   key it claimed as holder; one whose bucket it no longer holds is given
 *   back (available again, never started); one whose trust lapsed waits. A
 *   counted job starts whenever (its lease holds its slot).
 * - Time: a client's trust lapses, the window of a renewal in flight lapses
 *   after the one before it, and only then may the row that window backs
 *   run out in the database. One client may be SIGKILLed: its handlers die,
 *   its buffer is gone, its trust lapsed; its row and its leases stay until
 *   they run out, and a rescuer makes its leased jobs available again.
 *   A handler returns and completes its job.
 *
 * At most 3 clients and 4 jobs (the selections below are written out).
 *
 * Broken variants (model/check.sh), each of which spin must catch:
 *   NO_BUSY            taking a bucket ignores the leased jobs of its key.
 *   COUNTED_TAKES_HELD a counted claim does not pass over held buckets.
 *   START_UNHELD       a job claimed as holder starts though its bucket is no
 *                      longer held (it is never given back).
 *   TRUST_PAST_EXPIRY  the database may expire a row while its holder still
 *                      trusts it (a lease shorter than the lease budget).
 *   NO_LOCAL_LIMIT     the holder starts a job without counting its own
 *                      handlers of the key.
 */

#ifndef NC
#define NC 2
#endif
#ifndef NJ
#define NJ 2
#endif
#ifndef LIMIT
#define LIMIT 1
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif

#define AVAIL   0
#define RUNNING 1
#define DONE    2

/* A job of the key is leased (state running): the bucket is busy. */
#define BUSY (state[0] == RUNNING || (NJ > 1 && state[1] == RUNNING) || \
	(NJ > 2 && state[2] == RUNNING) || (NJ > 3 && state[3] == RUNNING))

/* Whether client me may start its buffered job j. */
#ifdef START_UNHELD
#define HOLDS (tw[me])
#else
#define HOLDS (held[me] && tw[me])
#endif
#ifdef NO_LOCAL_LIMIT
#define ROOM (true)
#else
#define ROOM (hc[me] < LIMIT)
#endif
#define MAYSTART(j) (!crashed[me] && owner[j] == me && buf[j] && (!hb[j] || (HOLDS && ROOM)))
#ifdef START_UNHELD
#define GIVEBACK(j) (false)
#else
#define GIVEBACK(j) (!crashed[me] && owner[j] == me && buf[j] && hb[j] && !held[me])
#endif

/* The database. */
byte state[NJ];    /* the job rows */
byte owner[NJ];    /* the client that holds the job's lease, 1..NC; 0: none */
byte rowh = 0;     /* the client whose live row holds the bucket, 0: none */
bool rowpw = false; /* the row's last write is its holder's renewal in flight */

/* The clients, as the other processes need to see them. */
bool crashed[NC+1];
bool held[NC+1];   /* the bucket is in its held set */
bool tw[NC+1];     /* the window of its last answered renewal is open: it trusts its held set */
bool pw[NC+1];     /* the window of its renewal in flight is open */
bool rel[NC+1];    /* the bucket is to be released at its next renewal */
bool reading[NC+1]; /* a claim as holder read the row, and has not committed */
byte hc[NC+1];     /* its handlers running of jobs claimed as holder */
bool buf[NJ];      /* the job waits in its owner's buffer */
bool hb[NJ];       /* it was claimed as holder of the bucket */
byte crashes = 0;

/* Ghost: the handlers running, all clients together, and per job. */
byte hrun = 0;
bool hr[NJ];

/* Client me's claims. */
proctype client(byte me) {
	byte j, n;
end:
	do
	/* A claim as holder: the client's live row read, then the jobs leased
	 * and committed, two steps. */
	:: atomic {
		!crashed[me] && !reading[me] && rowh == me ->
		reading[me] = true;
		printf("c%d: claim as holder: reads its row\n", me)
	}
	:: atomic {
		reading[me] ->
		for (j : 0 .. NJ-1) {
			if
			:: state[j] == AVAIL ->
				state[j] = RUNNING; owner[j] = me; buf[j] = true; hb[j] = true;
				printf("c%d: claim as holder: leases job %d\n", me, j)
			:: true -> skip /* no room left in the client */
			fi
		};
		reading[me] = false; j = 0
	}
	/* A counted claim, under the claim lock, on a snapshot taken after it. */
	:: atomic {
		!crashed[me] && !reading[me] ->
		n = 0;
		for (j : 0 .. NJ-1) {
			if
			:: state[j] == RUNNING -> n++
			:: else -> skip
			fi
		};
		for (j : 0 .. NJ-1) {
			if
#ifdef COUNTED_TAKES_HELD
			:: n < LIMIT && state[j] == AVAIL ->
#else
			:: n < LIMIT && state[j] == AVAIL && rowh == 0 ->
#endif
				state[j] = RUNNING; owner[j] = me; buf[j] = true; hb[j] = false; n++;
				printf("c%d: counted claim: leases job %d\n", me, j)
			:: true -> skip /* no room left in the client */
			fi
		};
		n = 0; j = 0
	}
	:: crashed[me] -> break
	od
}

/* Client me's renewals (KeyShare): send, the transaction, the answer. */
proctype renewer(byte me) {
	bool relsent, got;
end:
	do
	:: atomic {
		!crashed[me] ->
		pw[me] = true; relsent = rel[me];
		if
		:: relsent -> printf("c%d: renewal sent, releasing the bucket\n", me)
		:: else -> printf("c%d: renewal sent\n", me)
		fi
	};
	atomic {
		if
		:: crashed[me] -> skip /* rolled back with the connection */
		:: else ->
			if
			:: rowh == me && relsent -> rowh = 0; rowpw = false;
				printf("db: c%d's row deleted (released)\n", me)
			:: rowh == me && !relsent -> rowpw = true;
				printf("db: c%d's row extended\n", me)
			:: else -> skip
			fi;
			if
#ifdef NO_BUSY
			:: rowh == 0 ->
#else
			:: rowh == 0 && !BUSY ->
#endif
				rowh = me; rowpw = true;
				printf("db: c%d takes the bucket\n", me)
			:: true -> skip /* its part is no bucket, or the bucket is not free */
			fi;
			got = (rowh == me)
		fi
	};
	atomic {
		if
		:: crashed[me] -> skip
		:: else ->
			if
			:: held[me] = got; tw[me] = pw[me]; rel[me] = false;
				if
				:: got && tw[me] -> printf("c%d: renewal answered: holds the bucket, trusted\n", me)
				:: got && !tw[me] -> printf("c%d: renewal answered: holds the bucket, its window lapsed\n", me)
				:: else -> printf("c%d: renewal answered: holds nothing\n", me)
				fi;
				if
				:: got -> skip
				:: got -> held[me] = false; rel[me] = true;
					printf("c%d: more than its part: lets the bucket go\n", me)
				:: else -> skip
				fi
			:: printf("c%d: renewal fails after its commit: nothing changes here\n", me)
			fi;
			pw[me] = false;
			if
			:: rowh == me -> rowpw = false
			:: else -> skip
			fi
		fi;
		relsent = false; got = false
	}
	:: crashed[me] -> break
	od
}

/* Client me's handlers. */
proctype handlers(byte me) {
	byte j;
end:
	do
	/* Start a buffered job. */
	:: atomic {
		if
		:: MAYSTART(0) -> j = 0
		:: NJ > 1 && MAYSTART(1) -> j = 1
		:: NJ > 2 && MAYSTART(2) -> j = 2
		:: NJ > 3 && MAYSTART(3) -> j = 3
		fi;
		buf[j] = false; hr[j] = true; hrun++;
		if
		:: hb[j] -> hc[me]++
		:: else -> skip
		fi;
		printf("c%d: handler of job %d starts (%d running)\n", me, j, hrun);
		assert(hrun <= LIMIT);
		j = 0
	}
	/* Give back a buffered job of a bucket no longer held. */
	:: atomic {
		if
		:: GIVEBACK(0) -> j = 0
		:: NJ > 1 && GIVEBACK(1) -> j = 1
		:: NJ > 2 && GIVEBACK(2) -> j = 2
		:: NJ > 3 && GIVEBACK(3) -> j = 3
		fi;
		buf[j] = false; hb[j] = false; state[j] = AVAIL; owner[j] = 0;
		printf("c%d: job %d given back\n", me, j);
		j = 0
	}
	/* A handler returns, and its job completes. */
	:: atomic {
		if
		:: !crashed[me] && owner[0] == me && hr[0] -> j = 0
		:: !crashed[me] && NJ > 1 && owner[1] == me && hr[1] -> j = 1
		:: !crashed[me] && NJ > 2 && owner[2] == me && hr[2] -> j = 2
		:: !crashed[me] && NJ > 3 && owner[3] == me && hr[3] -> j = 3
		fi;
		hr[j] = false; hrun--;
		if
		:: hb[j] -> hc[me]--; hb[j] = false
		:: else -> skip
		fi;
		state[j] = DONE; owner[j] = 0;
		printf("c%d: handler of job %d returns: completed\n", me, j);
		j = 0
	}
	:: crashed[me] -> break
	od
}

/* SIGKILL of one client: its handlers die, its buffer is gone, its trust
 * lapsed; its row and its leases stay until they run out. */
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
			:: owner[j] == c && hr[j] -> hr[j] = false; hrun--; hb[j] = false
			:: owner[j] == c && buf[j] -> buf[j] = false; hb[j] = false
			:: else -> skip
			fi
		};
		hc[c] = 0; held[c] = false; tw[c] = false; pw[c] = false; rel[c] = false; reading[c] = false;
		if
		:: rowh == c -> rowpw = false
		:: else -> skip
		fi;
		printf("c%d: killed\n", c);
		c = 0; j = 0
	}
	:: crashes >= MAXCRASH -> break
	od
}

/* Time: a client's trust lapses (its renewals did not get through within the
 * lease budget); the window of a renewal in flight lapses after the one
 * before it; the row whose backing window lapsed may run out (the database
 * clock passes expires_at). The rescue: a leased job of a killed client (its
 * lease ran out, after its trust) becomes available again. */
active proctype clock() {
	byte c, j;
end:
	do
	:: atomic {
		if
		:: tw[1] -> c = 1
		:: NC > 1 && tw[2] -> c = 2
		:: NC > 2 && tw[3] -> c = 3
		fi;
		tw[c] = false;
		printf("c%d: trust lapses\n", c);
		c = 0
	}
	:: atomic {
		if
		:: pw[1] && !tw[1] -> c = 1
		:: NC > 1 && pw[2] && !tw[2] -> c = 2
		:: NC > 2 && pw[3] && !tw[3] -> c = 3
		fi;
		pw[c] = false;
		printf("c%d: the window of its renewal in flight lapses\n", c);
		c = 0
	}
	:: atomic {
#ifdef TRUST_PAST_EXPIRY
		rowh != 0 ->
#else
		rowh != 0 && (rowpw -> !pw[rowh] : !tw[rowh]) ->
#endif
		printf("db: c%d's row runs out\n", rowh);
		rowh = 0; rowpw = false
	}
	:: atomic {
		if
		:: state[0] == RUNNING && crashed[owner[0]] -> j = 0
		:: NJ > 1 && state[1] == RUNNING && crashed[owner[1]] -> j = 1
		:: NJ > 2 && state[2] == RUNNING && crashed[owner[2]] -> j = 2
		:: NJ > 3 && state[3] == RUNNING && crashed[owner[3]] -> j = 3
		fi;
		state[j] = AVAIL; owner[j] = 0;
		printf("maintenance: rescue job %d\n", j);
		j = 0
	}
	od
}

init {
	byte c;
	atomic {
		for (c : 1 .. NC) {
			run client(c);
			run renewer(c);
			run handlers(c)
		}
	}
}
