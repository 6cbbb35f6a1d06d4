'use strict'
// peer.js runs graphile-worker or pg-boss for weir's benchmark: bench/cmd/compare
// (node.go) starts it as a child process and drives it over stdin and stdout.
//
//   node peer.js graphile|pgboss migrate   migrate the schema, make the queue, and
//                                           print {"package", "version", "settings"} as JSON
//   node peer.js graphile|pgboss client    serve the line protocol below
//
// The environment says where and how: WEIRBENCH_DATABASE_URL (never printed),
// WEIRBENCH_APP (the connections' application_name), WEIRBENCH_MAX_CONNS (the
// pool's size, the same as every system's), WEIRBENCH_SCHEMA, and for a client
// WEIRBENCH_CLIENT, JSON: {"work": bool, "settings": "throughput" | "latency" |
// "defaults", "workers": n (0: the settings'), "onStart": bool}.
//
// Requests, one a line on stdin, each answered "<id> ok" or "<id> error <text>":
//   <id> insertMany <first> <n>   jobs first..first+n-1 in one bulk call
//   <id> insert <seq>             job seq in a transaction of its own
//   <id> start                    start working
//   <id> stop                     stop gracefully; every completion is written
// and the client writes on its own, when it happens:
//   started <seq>                 a handler started job seq (when onStart)
//   completed <total>             completions written (committed) so far
// A client exits when stdin closes. It prints "ready" once connected.
//
// Completions are counted once the statement that wrote them has returned, as
// weir's and River's are: neither library says so itself (graphile-worker
// emits job:complete before its batched write, and pg-boss's worker does not
// wait for its complete), so the client watches the statements on its own pool
// (see completions below).

const pg = require('pg')

const [system, mode] = process.argv.slice(2)
const env = process.env
const databaseURL = env.WEIRBENCH_DATABASE_URL
const schema = env.WEIRBENCH_SCHEMA
const app = env.WEIRBENCH_APP || 'weirbench_' + system
const maxConns = Number(env.WEIRBENCH_MAX_CONNS || 20)

function fail (message) {
  process.stderr.write(`peer.js: ${message}\n`)
  process.exit(2)
}

let client
try {
  client = JSON.parse(env.WEIRBENCH_CLIENT || '{}')
} catch (err) {
  fail(`WEIRBENCH_CLIENT is not JSON: ${err.message}`)
}

if (!['graphile', 'pgboss'].includes(system)) fail(`unknown system ${JSON.stringify(system)} (graphile, pgboss)`)
if (!['migrate', 'client'].includes(mode)) fail(`unknown mode ${JSON.stringify(mode)} (migrate, client)`)
if (!databaseURL) fail('WEIRBENCH_DATABASE_URL is not set')
if (!schema || !/^[a-z_][a-z0-9_]*$/.test(schema)) fail(`WEIRBENCH_SCHEMA ${JSON.stringify(schema)} is not a plain lower-case identifier`)
if (!Number.isInteger(maxConns) || maxConns < 2) fail(`WEIRBENCH_MAX_CONNS ${JSON.stringify(env.WEIRBENCH_MAX_CONNS)} is not an integer of 2 or more`)
if (!['throughput', 'latency', 'defaults', undefined].includes(client.settings)) fail(`unknown settings ${JSON.stringify(client.settings)}`)

// Each system's settings, as bench/README.md gives them with their reasons.
const SETTINGS = {
  graphile: {
    // graphile-worker's performance page batches fetches (a local queue) and
    // completions (delay 0) and runs 24 jobs at once on a pool of 25. Here the
    // pool is every system's (20 by default), so 2 fewer jobs than connections,
    // as its docs size a pool; and a local queue of 5,000, not 500, since its
    // docs advise a much larger one for very fast jobs at high throughput (500:
    // 13-14k jobs/s, 2,000: 19-20k, 5,000 and 10,000: 24-25k in one-round drains
    // of 50,000). pollInterval stays at its default (2 s): new jobs come by
    // LISTEN/NOTIFY.
    throughput: { concurrency: 'pool', localQueueSize: 5000, batchDelay: 0 },
    // Its defaults (no local queue, no batching) with 100 handlers.
    defaults: { concurrency: 100 }
  },
  pgboss: {
    // pg-boss publishes none. A worker (one per work() call) fetches at most
    // batchSize jobs per polling interval, so the shortest interval it takes
    // (0.5 s) and large batches: 4 workers of 5,000 (one-round drains of
    // 50,000: 4 x 5,000 22-24k jobs/s, 2 x 10,000 24-30k, 1 x 20,000 21k,
    // 10 x 1,000 14k, 8 x 2,500 20k).
    throughput: { workers: 4, batchSize: 5000, pollingIntervalSeconds: 0.5 },
    // Its defaults (batchSize 1, a poll every 2 s) with 100 workers.
    defaults: { workers: 100 }
  }
}

// WEIRBENCH_PEER_SETTINGS, JSON, replaces some of the settings above, to try
// others: {"concurrency", "localQueueSize", "batchDelay"} for graphile,
// {"workers", "batchSize", "pollingIntervalSeconds"} for pgboss.
const override = (() => {
  const keys = system === 'graphile' ? ['concurrency', 'localQueueSize', 'batchDelay'] : ['workers', 'batchSize', 'pollingIntervalSeconds']
  let o
  try {
    o = JSON.parse(env.WEIRBENCH_PEER_SETTINGS || '{}')
  } catch (err) {
    fail(`WEIRBENCH_PEER_SETTINGS is not JSON: ${err.message}`)
  }
  for (const [k, v] of Object.entries(o)) {
    if (!keys.includes(k)) fail(`WEIRBENCH_PEER_SETTINGS: unknown setting ${JSON.stringify(k)} for ${system} (${keys.join(', ')})`)
    const least = k === 'batchDelay' ? 0 : 1
    if (typeof v !== 'number' || !(v >= least)) fail(`WEIRBENCH_PEER_SETTINGS: ${k} is not a number of ${least} or more`)
  }
  return o
})()

// describe says what settings s stand for, for the report's header.
function describe (s) {
  if (system === 'graphile') {
    return s.localQueueSize
      ? `concurrentJobs ${s.concurrency === 'pool' ? "the pool's size (--max-conns) less 2, 18 of the default 20" : s.concurrency}, localQueue.size ${s.localQueueSize}, completeJobBatchDelay ${s.batchDelay}, ` +
        `failJobBatchDelay ${s.batchDelay}, the rest default (pollInterval 2 s; new jobs by LISTEN/NOTIFY)`
      : `concurrentJobs ${s.concurrency}, the rest default (no local queue, no batching, pollInterval 2 s)`
  }
  return s.batchSize
    ? `${s.workers} workers (work() calls), batchSize ${s.batchSize}, pollingIntervalSeconds ${s.pollingIntervalSeconds} (its minimum), the rest default`
    : `${s.workers} workers (work() calls), the rest default (batchSize 1, pollingIntervalSeconds 2)`
}

// info is what migrate prints: the package's version and what each of the
// benchmark's settings stands for.
function info () {
  const pkg = system === 'graphile' ? 'graphile-worker' : 'pg-boss'
  const version = require(`${pkg}/package.json`).version
  const settings = {}
  for (const name of ['throughput', 'latency', 'defaults']) {
    settings[name] = `${pkg} ${version}: ` + describe(settingsOf(name))
  }
  return JSON.stringify({ package: pkg, version, settings })
}

function settingsOf (name = client.settings) {
  const s = { ...SETTINGS[system][name === 'defaults' ? 'defaults' : 'throughput'], ...override }
  if (s.concurrency === 'pool' && mode === 'client') s.concurrency = maxConns - 2
  if (client.workers > 0) {
    if (system === 'graphile') s.concurrency = client.workers
    else s.workers = client.workers
  }
  return s
}

// out batches the lines written in one turn of the event loop into one write.
const out = {
  lines: [],
  completed: -1,
  scheduled: false,
  line (s) { this.lines.push(s); this.schedule() },
  setCompleted (n) { this.completed = n; this.schedule() },
  schedule () {
    if (!this.scheduled) {
      this.scheduled = true
      process.nextTick(() => this.flush())
    }
  },
  flush () {
    this.scheduled = false
    if (this.completed >= 0) {
      // First: an answer in the same batch (stop's) may depend on it.
      this.lines.unshift(`completed ${this.completed}`)
      this.completed = -1
    }
    if (this.lines.length) {
      process.stdout.write(this.lines.join('\n') + '\n')
      this.lines = []
    }
  }
}

function warn (message) {
  process.stderr.write(`${system}: ${String(message).replace(/\s+/g, ' ')}\n`)
}

const started = client.onStart ? seq => out.line(`started ${seq}`) : () => {}

// completions counts the jobs of the completion statements that have
// returned, and keeps the ones in flight, for stop to wait on.
const completions = {
  total: 0,
  inflight: new Set(),
  track (promise, count) {
    this.inflight.add(promise)
    const done = () => this.inflight.delete(promise)
    promise.then(res => {
      this.total += count(res)
      out.setCompleted(this.total)
    }).then(done, err => {
      done()
      warn(`completion not counted: ${err.message}`)
    })
  },
  async settle () {
    while (this.inflight.size) await Promise.allSettled([...this.inflight])
  }
}

function newPool (Client) {
  const pool = new pg.Pool({ connectionString: databaseURL, max: maxConns, application_name: app, ...(Client ? { Client } : {}) })
  // Errors of idle and of checked-out connections, which would otherwise end
  // the process (graphile-worker asks a pool it is given for both).
  pool.on('error', err => warn(`pool: ${err.message}`))
  pool.on('connect', c => c.on('error', err => warn(`connection: ${err.message}`)))
  return pool
}

// graphile-worker completes a job by deleting it, with a prepared statement
// named complete_job/<schema> (one job) or complete_jobs/<schema> (a batch);
// the rows deleted are the jobs completed.
function graphileCountingClient () {
  const names = new Set([`complete_job/${schema}`, `complete_jobs/${schema}`])
  return class extends pg.Client {
    query (config, values, callback) {
      const res = super.query(config, values, callback)
      if (config && typeof config === 'object' && names.has(config.name) && res && typeof res.then === 'function') {
        completions.track(res, r => r.rowCount)
      }
      return res
    }
  }
}

async function graphile () {
  const { run, runMigrations, makeWorkerUtils, Logger } = require('graphile-worker')
  const logger = new Logger(() => (level, message) => {
    if (level === 'error' || level === 'warning') warn(message)
  })
  if (mode === 'migrate') {
    const pool = newPool()
    await runMigrations({ pgPool: pool, schema, logger })
    await pool.end()
    out.line(info())
    return
  }
  const pool = newPool(graphileCountingClient())
  const utils = await makeWorkerUtils({ pgPool: pool, schema, logger })
  let runner = null
  await serve({
    insertMany: (first, n) => utils.addJobs(Array.from({ length: n }, (_, i) => ({ identifier: 'noop', payload: { seq: first + i } }))),
    insert: seq => utils.addJob('noop', { seq }),
    async start () {
      const s = settingsOf()
      const worker = s.localQueueSize
        ? { localQueue: { size: s.localQueueSize }, completeJobBatchDelay: s.batchDelay, failJobBatchDelay: s.batchDelay }
        : {}
      runner = await run({
        pgPool: pool,
        schema,
        logger,
        concurrency: s.concurrency,
        noHandleSignals: true,
        taskList: { noop: async payload => { started(payload.seq) } },
        preset: { worker }
      })
    },
    async stop () {
      if (runner) await runner.stop()
      runner = null
      await completions.settle()
    },
    async close () {
      if (runner) await runner.stop()
      await utils.release()
      await pool.end()
    }
  })
}

async function pgboss () {
  const PgBoss = require('pg-boss')
  const plans = require('pg-boss/src/plans')
  const completeSQL = plans.completeJobs(schema)
  const pool = newPool()
  // pg-boss runs every statement through the db it is given (its documented
  // db option); its completion statement returns the count of jobs completed.
  // The statements in flight are kept for close to wait on. Once closed, the
  // db answers nothing (undefined), as pg-boss's own does once closed: its stop
  // leaves each worker's loop to end at its next turn, which may fetch and
  // complete once more.
  const inflight = new Set()
  let closed = false
  const db = {
    executeSql (text, values) {
      if (closed) return Promise.resolve(undefined)
      const res = pool.query(text, values)
      const done = () => inflight.delete(res)
      inflight.add(res)
      res.then(done, done)
      if (text === completeSQL) completions.track(res, r => Number(r.rows[0].count))
      return res
    }
  }
  const s = settingsOf()
  const boss = new PgBoss(mode === 'migrate' ? { db, schema, supervise: false, schedule: false } : { db, schema })
  boss.on('error', err => warn(err.message))
  await boss.start()
  if (mode === 'migrate') {
    await boss.createQueue('noop')
    await boss.stop({ graceful: false, wait: true })
    await pool.end()
    out.line(info())
    return
  }
  await serve({
    insertMany: (first, n) => boss.insert(Array.from({ length: n }, (_, i) => ({ name: 'noop', data: { seq: first + i } }))),
    insert: seq => boss.send('noop', { seq }),
    async start () {
      const options = {}
      if (s.batchSize) options.batchSize = s.batchSize
      if (s.pollingIntervalSeconds) options.pollingIntervalSeconds = s.pollingIntervalSeconds
      for (let i = 0; i < s.workers; i++) {
        await boss.work('noop', options, async jobs => { for (const job of jobs) started(job.data.seq) })
      }
    },
    async stop () {
      // Graceful: it waits for the handlers that are running to return, and
      // then for the completions they have sent.
      await boss.stop({ graceful: true, wait: true, close: false })
      await completions.settle()
    },
    async close () {
      await boss.stop({ graceful: false, wait: true, close: false })
      closed = true
      while (inflight.size) await Promise.allSettled([...inflight])
      await pool.end()
    }
  })
}

// serve answers the requests on stdin until it closes, then closes the client.
async function serve (c) {
  const readline = require('node:readline')
  out.line('ready')
  const handle = async (id, op, args) => {
    switch (op) {
      case 'insertMany': return c.insertMany(Number(args[0]), Number(args[1]))
      case 'insert': return c.insert(Number(args[0]))
      case 'start': return c.start()
      case 'stop': return c.stop()
      default: throw new Error(`unknown request ${JSON.stringify(op)}`)
    }
  }
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  const pending = new Set()
  for await (const line of rl) {
    const [id, op, ...args] = line.trim().split(/\s+/)
    if (!id) continue
    const p = handle(id, op, args).then(
      () => out.line(`${id} ok`),
      err => out.line(`${id} error ${String(err && err.message ? err.message : err).replace(/\s+/g, ' ')}`))
    pending.add(p)
    p.finally(() => pending.delete(p))
  }
  await Promise.allSettled([...pending])
  await c.close()
}

(system === 'graphile' ? graphile() : pgboss()).then(() => {
  out.flush()
  process.exit(0)
}, err => {
  out.flush()
  fail(err && err.stack ? err.stack : String(err))
})
