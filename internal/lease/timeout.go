package lease

import (
	"time"

	"github.com/weirq/weir/weirtype"
)

// timeouts cancels handlers at their attempts' timeouts with one timer for the
// whole table, where a timer per attempt would cost an allocation and two
// changes of the runtime's timer heap per job. Attempts are kept in one list
// per timeout, in the order they started: as every attempt of a list has the
// same timeout, each list is also in the order of their deadlines, so adding
// and removing are O(1) and the timer only needs the lists' heads. It is
// guarded by the table's mutex.
type timeouts struct {
	lists map[time.Duration]*timeoutList
	timer *time.Timer
	at    time.Time // when timer fires; zero when it is stopped
}

// timeoutList links the running attempts of one timeout, the earliest deadline
// first (Job.prevDue, Job.nextDue).
type timeoutList struct{ head, tail *Job }

// addTimeoutLocked cancels j's handler with weirtype.ErrJobTimeout at due,
// which is timeout after the latest deadline of its list or later. t.mu is
// held.
func (t *Table) addTimeoutLocked(j *Job, timeout time.Duration, due time.Time) {
	tm := &t.timeouts
	if tm.lists == nil {
		tm.lists = map[time.Duration]*timeoutList{}
	}
	l := tm.lists[timeout]
	if l == nil {
		l = &timeoutList{}
		tm.lists[timeout] = l
	}
	j.timeout, j.due, j.prevDue, j.nextDue = timeout, due, l.tail, nil
	if l.tail != nil {
		l.tail.nextDue = j
	} else {
		l.head = j
	}
	l.tail = j
	if tm.at.IsZero() || due.Before(tm.at) {
		t.armLocked(due)
	}
}

// removeTimeoutLocked forgets j's timeout, if it has one pending; when no
// attempt has one left, the timer stops. t.mu is held.
func (t *Table) removeTimeoutLocked(j *Job) {
	if j.due.IsZero() {
		return
	}
	tm := &t.timeouts
	l := tm.lists[j.timeout]
	if j.prevDue != nil {
		j.prevDue.nextDue = j.nextDue
	} else {
		l.head = j.nextDue
	}
	if j.nextDue != nil {
		j.nextDue.prevDue = j.prevDue
	} else {
		l.tail = j.prevDue
	}
	j.prevDue, j.nextDue, j.due = nil, nil, time.Time{}
	if l.head == nil {
		delete(tm.lists, j.timeout)
	}
	if len(tm.lists) == 0 && tm.timer != nil {
		tm.timer.Stop()
		tm.at = time.Time{}
	}
}

// armLocked makes the timer fire at due. t.mu is held.
func (t *Table) armLocked(due time.Time) {
	tm := &t.timeouts
	tm.at = due
	if tm.timer == nil {
		tm.timer = time.AfterFunc(time.Until(due), t.fireTimeouts)
		return
	}
	tm.timer.Reset(time.Until(due))
}

// fireTimeouts cancels the handlers whose deadline passed and sets the timer
// for the next one. A timer that fires early (its attempt returned, or it was
// set again meanwhile) cancels nothing.
func (t *Table) fireTimeouts() {
	t.mu.Lock()
	defer t.mu.Unlock()
	tm := &t.timeouts
	tm.at = time.Time{}
	now := time.Now()
	var next time.Time
	for _, l := range tm.lists {
		for l.head != nil && !l.head.due.After(now) {
			j := l.head
			t.removeTimeoutLocked(j)
			j.cancel(weirtype.ErrJobTimeout)
		}
		if l.head != nil && (next.IsZero() || l.head.due.Before(next)) {
			next = l.head.due
		}
	}
	if !next.IsZero() {
		t.armLocked(next)
	}
}
