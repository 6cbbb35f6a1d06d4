package weir

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// logLinesPerSecond is how many lines of one kind (a message, at a level, for a
// key such as a job kind) the client logs in a second; the rest are counted.
const logLinesPerSecond = 10

// logLimiterMaxKeys bounds the keys a limiter tracks at once: keys come from job
// kinds and notification payloads, which other roles choose.
const logLimiterMaxKeys = 1000

// logLimiter rate-limits repeated log lines, so that a failing kind, or a flood of
// notifications, cannot flood the log. Per key it logs at most limit lines in each
// second; the lines beyond are counted, and one summary line at the same level
// ("weir: suppressed similar lines") reports them when the key next logs after
// that second, or when the client stops (flush).
type logLimiter struct {
	logger *slog.Logger
	now    func() time.Time
	limit  int

	mu   sync.Mutex
	keys map[logKey]*logWindow
}

type logKey struct {
	level slog.Level
	msg   string
	key   string
}

type logWindow struct {
	start      time.Time
	lines      int
	suppressed int
}

func newLogLimiter(logger *slog.Logger, now func() time.Time, limit int) *logLimiter {
	return &logLimiter{logger: logger, now: now, limit: limit, keys: map[logKey]*logWindow{}}
}

// log logs msg with attrs at level unless key's lines of this second are used up.
func (l *logLimiter) log(level slog.Level, msg, key string, attrs ...any) {
	now := l.now()
	var summaries []logSummary
	l.mu.Lock()
	k := logKey{level, msg, key}
	w := l.keys[k]
	if w != nil && now.Sub(w.start) >= time.Second {
		if w.suppressed > 0 {
			summaries = append(summaries, logSummary{k, w.suppressed})
		}
		delete(l.keys, k)
		w = nil
	}
	if w == nil {
		if len(l.keys) >= logLimiterMaxKeys {
			summaries = append(summaries, l.sweepLocked(now)...)
			if len(l.keys) >= logLimiterMaxKeys {
				k.key = "" // too many fresh keys: the rest share one budget
			}
		}
		if w = l.keys[k]; w == nil {
			w = &logWindow{start: now}
			l.keys[k] = w
		}
	}
	w.lines++
	emit := w.lines <= l.limit
	if !emit {
		w.suppressed++
	}
	l.mu.Unlock()
	l.emitSummaries(summaries)
	if emit {
		l.logger.Log(context.Background(), level, msg, attrs...)
	}
}

// job logs a line about one job at level, with the attributes every job line
// has, then attrs; rate-limited per message and kind. token is the lease the line
// is about. The job's args are never logged: they may hold secrets, and others
// choose them.
func (l *logLimiter) job(level slog.Level, msg string, row *JobRow, token int64, attrs ...any) {
	l.log(level, msg, row.Kind, append([]any{
		slog.Int64("job_id", row.ID), slog.String("kind", row.Kind), slog.String("queue", row.Queue),
		slog.Int("attempt", row.Attempt), slog.Int("max_attempts", row.MaxAttempts),
		slog.Int64("lease_token", token),
	}, attrs...)...)
}

type logSummary struct {
	key logKey
	n   int
}

// sweepLocked forgets the windows whose second has ended and returns their
// summaries. l.mu is held.
func (l *logLimiter) sweepLocked(now time.Time) []logSummary {
	var out []logSummary
	for k, w := range l.keys {
		if now.Sub(w.start) >= time.Second {
			if w.suppressed > 0 {
				out = append(out, logSummary{k, w.suppressed})
			}
			delete(l.keys, k)
		}
	}
	return out
}

// flush reports every count of suppressed lines and forgets all windows.
func (l *logLimiter) flush() {
	l.mu.Lock()
	var summaries []logSummary
	for k, w := range l.keys {
		if w.suppressed > 0 {
			summaries = append(summaries, logSummary{k, w.suppressed})
		}
	}
	clear(l.keys)
	l.mu.Unlock()
	l.emitSummaries(summaries)
}

func (l *logLimiter) emitSummaries(summaries []logSummary) {
	for _, s := range summaries {
		attrs := []any{slog.String("message", s.key.msg)}
		if s.key.key != "" {
			attrs = append(attrs, slog.String("key", s.key.key))
		}
		attrs = append(attrs, slog.Int("suppressed", s.n))
		l.logger.Log(context.Background(), s.key.level, "weir: suppressed similar lines", attrs...)
	}
}
