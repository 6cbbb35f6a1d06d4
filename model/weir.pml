/*
 * weir.pml: a model of weir's lease protocol, for the spin model checker.
 *
 * docs/design/model.md says what this covers, what it leaves out, and how each step maps
 * to the runtime (producer.go, engine.go, internal/lease, internal/completer), to the
 * maintenance leader (internal/maintenance/tasks.go) and to the statements of
 * weirdriver/weirpgx/runtime_queries.go. model/check.sh runs it (`make model`).
 *
 * Parts:
 *   - the database: NJ job rows; every statement is one atomic step with the
 *     guard of its SQL;
 *   - NW workers (clients), one job at a time each: producer (claim), handler,
 *     completer (finalize), heartbeat (renew, local lease deadline) and Stop,
 *     each step one branch of the worker's loop; a worker can crash between any
 *     two of its steps;
 *   - one link per worker: a finalize sent is applied later (any delay), or its
 *     call times out while the statement may still land afterwards, or it commits
 *     and its reply is lost. A claim's reply can be lost after it committed; a
 *     renewal can time out and land later. What a dead worker sent may still land;
 *   - maintenance (the elected leader; one at a time is taken as given): the
 *     database clock passing a lease's expiry, rescue, and scheduling of
 *     retryable jobs.
 *
 * Variants, each breaking one part of the protocol (check.sh expects spin to
 * find an error in each):
 *   -DNO_FENCE           JobFinalize ignores the lease token          (G3)
 *   -DNO_FENCE_COMPLETE  ... but only when it writes a completion    (G3)
 *   -DNO_RENEW_FENCE     JobRenew ignores the lease token             (G3)
 *   -DNO_TOKEN_BUMP      JobClaim keeps the old lease token           (G3)
 *   -DNO_DRAIN           Stop exits without waiting for outcome writes (G2)
 *   -DHB_STOP_EARLY      Stop stops the heartbeat before the drain     (KEEP)
 *   -DSTOP_NIL_ON_LOST   Stop ignores the outcomes it found stale or
 *                        abandoned, as weir's Stop did before the fix  (G2)
 *
 * With -DCOMPLETE_TX a handler may also complete its job in its own transaction
 * (weir.JobCompleteTx, weirpgx jobCompleteOne), which then commits or rolls back;
 * check.sh searches that in a configuration of its own. Its broken variant:
 *   -DNO_TX_FENCE        the completion checks only that the job runs, not the
 *                        lease token, as River's JobCompleteTx does     (G3)
 */

/* ---- bounds (check.sh may override them with -D) ------------------------- */
#ifndef NJ
#define NJ 2            /* jobs: 1 or 2 */
#endif
#define NW 2            /* workers */
#ifndef MAXATT
#define MAXATT 2        /* max_attempts of every job */
#endif
#ifndef MAXCLAIMS
#define MAXCLAIMS 3     /* successful claims, over all jobs: bounds the run */
#endif
#ifndef MAXFAULTS
#define MAXFAULTS 2     /* timeouts and lost replies, over all links */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1      /* workers that crash (SIGKILL) */
#endif

mtype = { AVAILABLE, RUNNING, RETRYABLE, COMPLETED, DISCARDED }; /* weir_job.state   */
mtype = { NOOUT, COMPLETE, RETRY, DISCARD, RELEASE, RETURN };    /* finalize outcome */
mtype = { UP, STOPPING, EXITED, CRASHED };                       /* a worker's life  */
mtype = { IDLE, BUFFERED, HANDLER, FINALIZING };                 /* its held lease   */
mtype = { FREE, REQ };                                           /* a statement      */
mtype = { G_NONE, G_RETURNED };                                  /* G2 ghost         */

/* ---- the database: one row per job ---------------------------------------- */
mtype st[NJ];    /* state */
byte  att[NJ];   /* attempt */
byte  tok[NJ];   /* lease_token: +1 at every claim, never reset */
bool  exp[NJ];   /* lease_expires_at < now(), by the database clock */

/* ---- a statement on the wire, between one worker and the database --------- */
typedef Stmt {
	mtype ph;    /* FREE, or REQ: sent and not applied yet */
	bool  w8;    /* the worker still waits for its answer */
	byte  job;
	byte  tk;    /* the lease token it carries */
	byte  gl;    /* ghost: the lease it was sent under */
	mtype out;   /* finalize: the outcome */
};
Stmt fs[NW];     /* the completer's JobFinalize */
Stmt rs[NW];     /* a JobRenew whose call timed out: it may still land */
#ifdef COMPLETE_TX
Stmt cs[NW];     /* the handler's JobCompleteTx, with its transaction's commit */
#endif

/* ---- each worker's local state (lease.Job in internal/lease) --------------- */
mtype life[NW];
mtype hs[NW];         /* lease.Job state: IDLE (no lease), BUFFERED, HANDLER, FINALIZING */
byte  hj[NW];         /* the held job */
byte  ht[NW];         /* its lease token */
byte  hgl[NW];        /* ghost: which lease of the job it is */
byte  hatt[NW];       /* its attempt, as claimed */
mtype hout[NW];       /* the outcome to write */
bool  lost[NW];       /* lease.Job lost: the lease is known gone, or no longer trusted */
bool  hbfail[NW];     /* a renewal failed: the local deadline may pass */
bool  cancelled[NW];  /* the handler's context was cancelled by the shutdown */
bool  soft[NW];       /* Stop's soft deadline passed */
bool  sent[NW];       /* the first finalize went out */
bool  retry[NW];      /* a finalize call failed; it waits to be retried */
bool  unwritten[NW];  /* completer.unwritten not empty: since Stop began, an outcome
                         of a handler that ran (not a RETURN) came back stale or was
                         abandoned; Stop returns an error naming the job */
bool  intx[NW];       /* lease.Job completedInTx: the handler's JobCompleteTx applied
                         (its transaction then committed, or rolled back) */
bool  txdone[NW];     /* ghost: ... and its transaction committed */

byte claims = 0;
byte faults = 0;
byte crashes = 0;

/* ---- ghost state for the properties --------------------------------------- */
/* The properties name leases by ghost numbers that the protocol never reads, so
 * that they hold whatever the tokens do: gl[j] is the number of j's current
 * lease (j's claims so far). With weir's tokens it equals tok[j]. */
byte  gl[NJ];
bool  lfault[NW];     /* a statement of w about the lease it holds failed (timed out,
                         or lost its reply): read only by the KEEP assertion */
/* per worker w and job j, at R(w, j): */
#define R(w, j) ((w) * NJ + (j))
mtype g2s[NW * NJ];   /* G_RETURNED: a handler of j run by w returned a final
                         outcome (complete, discard), and that outcome was not
                         found stale or abandoned before w's Stop began */
byte  g2l[NW * NJ];   /* ... under this (ghost) lease */
bool  g2done[NJ];     /* such a handler returned and then its worker's Stop returned
                         nil: the job must never be claimed again */

#define alive(w)  (life[w] == UP || life[w] == STOPPING)

/* w holds j's current lease and trusts it (has not seen it lost, and its local
 * deadline has not passed). */
#define HOLDS(w, j) (alive(w) && hs[w] != IDLE && hj[w] == j && hgl[w] == gl[j] && !lost[w])
#define TRUSTED(j)  (HOLDS(0, j) || HOLDS(1, j))

#if NJ == 1
#define SOME_AVAILABLE (st[0] == AVAILABLE)
#else
#define SOME_AVAILABLE (st[0] == AVAILABLE || st[1] == AVAILABLE)
#endif

/* Stop's step 5: every finalization resolved (written, found stale or
 * abandoned). NO_DRAIN awaits the handlers (step 3) but not their outcomes. */
#ifdef NO_DRAIN
#define DRAINED(w) (hs[w] == IDLE || hs[w] == FINALIZING)
#else
#define DRAINED(w) (hs[w] == IDLE)
#endif

#if defined(NO_FENCE)
#define FIN_FENCE(w, j)   (st[j] == RUNNING)
#elif defined(NO_FENCE_COMPLETE)
#define FIN_FENCE(w, j)   (st[j] == RUNNING && (fs[w].out == COMPLETE || tok[j] == fs[w].tk))
#else
#define FIN_FENCE(w, j)   (st[j] == RUNNING && tok[j] == fs[w].tk)
#endif
/* The handler may return: not while it waits for its JobCompleteTx. */
#ifdef COMPLETE_TX
#define RETURNS(w) (hs[w] == HANDLER && cs[w].ph == FREE)
#else
#define RETURNS(w) (hs[w] == HANDLER)
#endif
#ifdef NO_TX_FENCE
#define TX_FENCE(w, j)    (st[j] == RUNNING)
#else
#define TX_FENCE(w, j)    (st[j] == RUNNING && tok[j] == cs[w].tk)
#endif
#ifdef NO_RENEW_FENCE
#define RENEW_FENCE(j, t) (st[j] == RUNNING)
#else
#define RENEW_FENCE(j, t) (st[j] == RUNNING && tok[j] == t)
#endif

/* The heartbeat renews while the worker holds leases, until Stop's step 6;
 * HB_STOP_EARLY stops it at step 1. */
#ifdef HB_STOP_EARLY
#define HB_ON(w) (life[w] == UP)
#else
#define HB_ON(w) true
#endif

/* ---- statements ------------------------------------------------------------ */

/* JobClaim (weirpgx jobClaim), with MaxWorkers 1 and no prefetch beyond it:
 *   WITH picked AS (SELECT id FROM weir_job WHERE state = 'available' ...
 *     ORDER BY priority, scheduled_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
 *   UPDATE weir_job SET state = 'running', attempt = attempt + 1,
 *     lease_token = lease_token + 1, lease_expires_at = now() + $lease ...
 * It takes the first available job by id. */
inline sql_claim(w, j) {
	j = 0;
	do
	:: j < NJ - 1 && st[j] != AVAILABLE -> j++
	:: else -> break
	od;
	st[j] = RUNNING; att[j]++; exp[j] = false; gl[j]++;
#ifndef NO_TOKEN_BUMP
	tok[j]++;
#endif
	printf("w%d: claim job %d: lease %d (token %d), attempt %d\n", w, j, gl[j], tok[j], att[j]);
	assert(!g2done[j]);                  /* G2: a finished job never starts again */
	assert(att[j] <= MAXATT);            /* an available job has an attempt left */
	claims++
}

/* JobRenew (weirpgx jobRenew), for the lease (j, t), ghost lease g:
 *   UPDATE weir_job SET lease_expires_at = now() + $lease
 *   WHERE id = $id AND lease_token = $token AND state = 'running'
 * ok: renewed; not ok: stale, reported Lost, row untouched. */
inline sql_renew(j, t, g, ok) {
	if
	:: RENEW_FENCE(j, t) ->
		printf("db: renew job %d lease %d: applied (current lease: %d)\n", j, g, gl[j]);
		assert(g == gl[j]);          /* G3: only the current lease changes the row */
		exp[j] = false; ok = true
	:: else -> ok = false
	fi
}

/* JobFinalize (weirpgx jobFinalize), one row of the batch:
 *   UPDATE weir_job j SET state = CASE outcome ..., attempt = attempt - 1 for
 *     release and return, lease_expires_at = NULL ... FROM input i
 *   WHERE j.id = i.id AND j.lease_token = i.lease_token AND j.state = 'running'
 * Not matched: stale, false at its position, row untouched. */
inline sql_finalize(w, j, ok) {
	j = fs[w].job;
	if
	:: FIN_FENCE(w, j) -> ok = true;
		printf("db: finalize job %d lease %d %e: applied (current lease: %d)\n", j, fs[w].gl, fs[w].out, gl[j]);
		assert(fs[w].gl == gl[j]);   /* G3: only the current lease changes the row */
		if
		:: fs[w].out == COMPLETE -> st[j] = COMPLETED
		:: fs[w].out == RETRY    -> st[j] = RETRYABLE   /* due later: JobSchedule */
		:: fs[w].out == DISCARD  -> st[j] = DISCARDED
		:: fs[w].out == RELEASE || fs[w].out == RETURN ->
			st[j] = AVAILABLE; att[j]--        /* no attempt spent */
		fi;
		exp[j] = false
	:: else -> ok = false;
		printf("db: finalize job %d lease %d %e: stale (job %e)\n", j, fs[w].gl, fs[w].out, st[j])
	fi
}

/* JobRescue (weirpgx jobRescue), for one expired lease:
 *   ... WHERE state = 'running' AND lease_expires_at < now() ...
 *   SET state = CASE WHEN attempt >= max_attempts THEN 'discarded'
 *     ELSE 'retryable' END, lease_expires_at = NULL   (the token is kept) */
inline sql_rescue(j) {
	if
	:: att[j] >= MAXATT -> st[j] = DISCARDED
	:: else -> st[j] = RETRYABLE
	fi;
	exp[j] = false;
	printf("maintenance: rescue job %d: %e\n", j, st[j])
}

/* ---- a worker ---------------------------------------------------------------- */

/* The lease is forgotten (written, stale, abandoned, or dropped while buffered);
 * every field goes back to its rest value, so that equal states are equal. */
inline forget(w) {
	hs[w] = IDLE; hj[w] = 0; ht[w] = 0; hgl[w] = 0; hatt[w] = 0; hout[w] = NOOUT;
	lost[w] = false; hbfail[w] = false; cancelled[w] = false;
	sent[w] = false; retry[w] = false; lfault[w] = false;
	intx[w] = false; txdone[w] = false
}

inline free_stmt(s) {
	s.ph = FREE; s.w8 = false; s.job = 0; s.tk = 0; s.gl = 0; s.out = NOOUT
}

/* A statement of w about its lease failed (timed out, or lost its reply). */
inline link_fault(w) {
	faults++; lfault[w] = true
}

/* w's outcome came back stale or was abandoned (completer.write, abandon:
 * noteUnwritten). KEEP: only when one of w's own statements about that lease
 * failed; a worker that reaches the database keeps its lease until its outcome
 * is written. Then:
 *   - once Stop has begun, an outcome of a handler that ran (not a RETURN) is
 *     kept for Stop's error (STOP_NIL_ON_LOST: the old runtime, it is not);
 *   - before Stop began, it is not Stop's business: the runtime counts it
 *     (Stats().StaleWrites, Abandoned) and logs it, and G2 asks nothing of
 *     that handler's execution any more: its ghost is cleared. */
inline note_unwritten(w) {
	assert(lfault[w]);                   /* KEEP: a lease is lost only through a fault */
	if
	:: life[w] == STOPPING && hout[w] != RETURN ->
#ifndef STOP_NIL_ON_LOST
		unwritten[w] = true;
		printf("w%d: outcome of job %d unwritten during Stop: kept for Stop's error\n", w, hj[w])
#else
		printf("w%d: outcome of job %d unwritten during Stop: Stop ignores it\n", w, hj[w])
#endif
	:: life[w] == UP && g2s[R(w, hj[w])] == G_RETURNED && g2l[R(w, hj[w])] == hgl[w] ->
		g2s[R(w, hj[w])] = G_NONE; g2l[R(w, hj[w])] = 0
	:: else -> skip
	fi
}

/* The process is gone: nobody waits for its statements any more (they may still
 * land), and its local state no longer matters. */
inline gone(w) {
	fs[w].w8 = false; forget(w); soft[w] = false; unwritten[w] = false;
	g2s[R(w, 0)] = G_NONE; g2l[R(w, 0)] = 0;
#if NJ > 1
	g2s[R(w, 1)] = G_NONE; g2l[R(w, 1)] = 0;
#endif
}

proctype worker(byte w) {
	byte j, t, g;
	bool ok;
	do
	/* -- producer (producer.go fill): claim when it holds nothing ----------- */
	:: atomic { life[w] == UP && hs[w] == IDLE && claims < MAXCLAIMS && SOME_AVAILABLE ->
		sql_claim(w, j);
		if
		:: hs[w] = BUFFERED; hj[w] = j; ht[w] = tok[j]; hgl[w] = gl[j]; hatt[w] = att[j]
		:: faults < MAXFAULTS -> faults++;  /* it committed; nobody holds the lease */
			printf("w%d: ... the claim's reply is lost\n", w)
		fi;
		j = 0 }

	/* -- startBufferedLocked / MarkRunning ---------------------------------- */
	:: atomic { hs[w] == BUFFERED && life[w] == UP && !lost[w] -> hs[w] = HANDLER;
		printf("w%d: handler of job %d starts\n", w, hj[w]) }
	:: atomic { hs[w] == BUFFERED && life[w] == UP && lost[w] ->
		printf("w%d: buffered job %d dropped, lease lost\n", w, hj[w]); forget(w) }
	/* Stop step 2 (releaseBuffered): give it back, fenced, OutcomeReturn */
	:: atomic { hs[w] == BUFFERED && life[w] == STOPPING -> hout[w] = RETURN; hs[w] = FINALIZING;
		printf("w%d: buffered job %d to be returned\n", w, hj[w]) }

#ifdef COMPLETE_TX
	/* -- the handler completes its job in its own transaction (JobCompleteTx):
	 * refused at once if the lease is not trusted (Table.Standing); otherwise
	 * the fenced UPDATE is sent, and lands, with the transaction's end, later */
	:: atomic { hs[w] == HANDLER && !intx[w] && !lost[w] && cs[w].ph == FREE ->
		cs[w].ph = REQ; cs[w].w8 = true; cs[w].job = hj[w]; cs[w].tk = ht[w]; cs[w].gl = hgl[w];
		printf("w%d: handler completes job %d lease %d in its transaction: sent\n", w, hj[w], hgl[w]) }
#endif

	/* -- the handler returns (producer.go run, outcome.go finalization) ------ */
	:: atomic { RETURNS(w) ->
		if
		:: hout[w] = COMPLETE                           /* nil */
		:: !cancelled[w] && hatt[w] >= MAXATT -> hout[w] = DISCARD  /* error, none left */
		:: !cancelled[w] && hatt[w] < MAXATT -> hout[w] = RETRY     /* error */
		:: cancelled[w] -> hout[w] = RELEASE            /* error, cause ErrShutdown */
		fi;
		hs[w] = FINALIZING; cancelled[w] = false;
		printf("w%d: handler of job %d returns: %e\n", w, hj[w], hout[w]);
		if
		:: hout[w] == COMPLETE || hout[w] == DISCARD || txdone[w] ->
			g2s[R(w, hj[w])] = G_RETURNED; g2l[R(w, hj[w])] = hgl[w]
		:: else -> skip
		fi }

	/* -- completer (internal/completer Run, write, dropInvalid) -------------- */
	/* A first write goes out even under a lease known lost; a retry only while
	 * the lease is trusted. A copy of a timed-out call still on the wire is let
	 * land or vanish first. */
	:: atomic { hs[w] == FINALIZING && fs[w].ph == FREE &&
	            (!sent[w] || (retry[w] && !lost[w])) ->
		fs[w].ph = REQ; fs[w].w8 = true; fs[w].job = hj[w]; fs[w].tk = ht[w]; fs[w].gl = hgl[w];
		fs[w].out = hout[w]; sent[w] = true; retry[w] = false;
		printf("w%d: finalize job %d lease %d %e: sent\n", w, hj[w], hgl[w], hout[w]) }
	:: atomic { hs[w] == FINALIZING && retry[w] && lost[w] ->
		printf("w%d: outcome of job %d abandoned, lease lost\n", w, hj[w]);
		note_unwritten(w); forget(w) }

	/* -- heartbeat (internal/lease renew, Expire) ---------------------------- */
	:: atomic { hs[w] != IDLE && !lost[w] && HB_ON(w) ->
		if
		:: j = hj[w]; t = ht[w]; g = hgl[w]; sql_renew(j, t, g, ok); j = 0; t = 0; g = 0;
			if
			:: ok -> hbfail[w] = false                /* the deadline moves on */
			:: else -> lost[w] = true;                /* renewal found it gone */
				printf("w%d: renew job %d lease %d: stale, lease lost\n", w, hj[w], hgl[w])
			fi
		:: faults < MAXFAULTS && rs[w].ph == FREE ->  /* timed out; may land later */
			rs[w].ph = REQ; rs[w].job = hj[w]; rs[w].tk = ht[w]; rs[w].gl = hgl[w];
			hbfail[w] = true; link_fault(w);
			printf("w%d: renew job %d lease %d: call times out\n", w, hj[w], hgl[w])
		fi;
		ok = false }
	/* the local deadline (sent + lease - heartbeat interval) passes, before
	 * the database's expiry: loseLocked cancels the handler (ErrLeaseLost) */
	:: atomic { hs[w] != IDLE && hbfail[w] && !lost[w] -> lost[w] = true;
		printf("w%d: local lease deadline of job %d passes: lease lost\n", w, hj[w]) }

	/* -- Stop (shutdown.go shutdown) ----------------------------------------- */
	:: atomic { life[w] == UP -> life[w] = STOPPING;     /* 1. stop claiming */
#ifdef HB_STOP_EARLY
		hbfail[w] = (hs[w] != IDLE);                     /* no more renewals */
#endif
		printf("w%d: Stop begins\n", w) }
	/* 4. the soft deadline: cancel the running handler with ErrShutdown */
	:: atomic { life[w] == STOPPING && !soft[w] ->
		soft[w] = true;
		printf("w%d: Stop's soft deadline passes\n", w);
		if
		:: hs[w] == HANDLER -> cancelled[w] = true;
			printf("w%d: handler of job %d cancelled (ErrShutdown)\n", w, hj[w])
		:: else -> skip
		fi }
	/* 5.-6. drained, and no outcome unwritten since Stop began: Stop returns nil */
	:: atomic { life[w] == STOPPING && DRAINED(w) && !unwritten[w] ->
		printf("w%d: Stop returns nil\n", w);
		for (j : 0 .. NJ - 1) {
			if
			:: g2s[R(w, j)] == G_RETURNED ->
				assert(gl[j] == g2l[R(w, j)]);  /* G2: no execution began since it returned */
				g2done[j] = true
			:: else -> skip
			fi
		}
		j = 0;
		life[w] = EXITED; gone(w) };
		break
	/* drained, but an outcome went unwritten since Stop began (unwrittenJobs):
	 * Stop returns an error naming the job, which may run again */
	:: atomic { life[w] == STOPPING && DRAINED(w) && unwritten[w] ->
		printf("w%d: Stop returns an error: an outcome went unwritten\n", w);
		life[w] = EXITED; gone(w) };
		break
	/* the budget ran out: handler abandoned or an outcome not resolved; Stop
	 * returns an error. Statements on the wire may still land. */
	:: atomic { life[w] == STOPPING && soft[w] && !DRAINED(w) ->
		printf("w%d: Stop's budget runs out: Stop returns an error\n", w);
		life[w] = EXITED; gone(w) };
		break
	/* SIGKILL */
	:: atomic { crashes < MAXCRASH -> crashes++; life[w] = CRASHED;
#ifdef COMPLETE_TX
		free_stmt(cs[w]);    /* a transaction open at the crash rolls back */
#endif
		printf("w%d: crashes\n", w); gone(w) };
		break
	od
}

/* ---- the link between worker w and the database ---------------------------- */
proctype link(byte w) {
	byte j, t, g;
	bool ok;
end:
	do
	/* the finalize reaches the database, after any delay; the completer gets
	 * its answer (written or stale) and resolves the finalization */
	:: atomic { fs[w].ph == REQ && fs[w].w8 ->
		sql_finalize(w, j, ok); j = fs[w].job; free_stmt(fs[w]);
		if
#ifdef COMPLETE_TX
		:: !ok && intx[w] && st[j] == COMPLETED && tok[j] == ht[w] ->
			/* JobStatesUnder: the handler's transaction ended the job */
			printf("w%d: job %d ended by its handler's transaction\n", w, j)
#endif
		:: !ok && !(intx[w] && st[j] == COMPLETED && tok[j] == ht[w]) -> note_unwritten(w)
		:: else -> skip
		fi;
		j = 0; ok = false; forget(w) }
#ifdef COMPLETE_TX
	/* the handler's completion reaches the database, after any delay: fenced,
	 * it applies and its transaction commits or rolls back; stale, it changes
	 * nothing (ErrLeaseLost) and the transaction rolls back */
	:: atomic { cs[w].ph == REQ ->
		j = cs[w].job;
		if
		:: TX_FENCE(w, j) ->
			if
			:: printf("db: job %d completed in the transaction of lease %d: committed (current lease: %d)\n", j, cs[w].gl, gl[j]);
				assert(cs[w].gl == gl[j]);   /* G3: only the current lease's transaction commits */
				st[j] = COMPLETED; exp[j] = false;
				if
				:: alive(w) -> txdone[w] = true
				:: else -> skip    /* an abandoned handler's transaction, after Stop */
				fi
			:: printf("db: job %d completed in the transaction of lease %d: rolled back\n", j, cs[w].gl)
			fi;
			if
			:: alive(w) -> intx[w] = true
			:: else -> skip
			fi
		:: else -> printf("db: job %d completion under lease %d: stale, the transaction rolls back\n", j, cs[w].gl)
		fi;
		j = 0; free_stmt(cs[w]) }
#endif
	/* its call times out; the statement stays on the wire */
	:: atomic { fs[w].ph == REQ && fs[w].w8 && faults < MAXFAULTS ->
		printf("w%d: finalize call times out, the statement stays on the wire\n", w);
		fs[w].w8 = false; retry[w] = true; link_fault(w) }
	/* it commits and its reply is lost */
	:: atomic { fs[w].ph == REQ && fs[w].w8 && faults < MAXFAULTS ->
		sql_finalize(w, j, ok); j = 0; ok = false; free_stmt(fs[w]); retry[w] = true; link_fault(w);
		printf("w%d: ... and its reply is lost\n", w) }
	/* a statement nobody waits for lands late, or never */
	:: atomic { fs[w].ph == REQ && !fs[w].w8 ->
		printf("w%d: a finalize nobody waits for lands\n", w); sql_finalize(w, j, ok); j = 0; ok = false; free_stmt(fs[w]) }
	:: atomic { fs[w].ph == REQ && !fs[w].w8 -> free_stmt(fs[w]) }
	:: atomic { rs[w].ph == REQ -> j = rs[w].job; t = rs[w].tk; g = rs[w].gl;
		printf("w%d: a renewal nobody waits for lands\n", w);
		sql_renew(j, t, g, ok);
		j = 0; t = 0; g = 0; ok = false; free_stmt(rs[w]) }
	:: atomic { rs[w].ph == REQ -> free_stmt(rs[w]) }
	od
}

/* ---- maintenance: the elected leader, and the database clock --------------- */
proctype maintenance() {
end:
	do
	/* the clock passes the lease's expiry: only once no live worker trusts the
	 * lease, since a worker's local deadline comes first */
	:: atomic { st[0] == RUNNING && !exp[0] && !TRUSTED(0) -> exp[0] = true;
		printf("db: lease %d of job 0 expires\n", gl[0]) }
	:: atomic { st[0] == RUNNING && exp[0] -> sql_rescue(0) }       /* JobRescue */
	:: atomic { st[0] == RETRYABLE -> st[0] = AVAILABLE;            /* JobSchedule */
		printf("maintenance: schedule job 0: available\n") }
#if NJ > 1
	:: atomic { st[1] == RUNNING && !exp[1] && !TRUSTED(1) -> exp[1] = true;
		printf("db: lease %d of job 1 expires\n", gl[1]) }
	:: atomic { st[1] == RUNNING && exp[1] -> sql_rescue(1) }
	:: atomic { st[1] == RETRYABLE -> st[1] = AVAILABLE;
		printf("maintenance: schedule job 1: available\n") }
#endif
	od
}

/* ---- G1 (weak form): once nothing can move, every worker is gone and every job
 * is final or available: none is left running, or waiting for a rescue. ------- */
proctype quiescence() {
	byte j;
	timeout ->
	assert(!alive(0) && !alive(1));
	for (j : 0 .. NJ - 1) {
		assert(st[j] == AVAILABLE || st[j] == COMPLETED || st[j] == DISCARDED)
	}
}

init {
	byte i;
	atomic {
		for (i : 0 .. NJ - 1) {
			st[i] = AVAILABLE
		}
		for (i : 0 .. NW - 1) {
			life[i] = UP;
			forget(i); free_stmt(fs[i]); free_stmt(rs[i]);
#ifdef COMPLETE_TX
			free_stmt(cs[i])
#endif
		}
		for (i : 0 .. NW * NJ - 1) {
			g2s[i] = G_NONE
		}
		i = 0;
		run worker(0); run worker(1);
		run link(0); run link(1);
		run maintenance();
		run quiescence()
	}
}
