// Package clock is the time that the runtime's timers run on: the system's,
// or a fake one that a test moves by hand, so that a test of a backoff or an
// interval waits for nothing.
package clock

import "time"

// Clock tells the time and makes timers and tickers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Timer is a time.Timer of a Clock. As with time.Timer, no value sent before
// a Stop or a Reset is received after it.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
var Real Clock = system{}

// Or returns c, or Real when c is nil: a config's Clock left unset.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

type system struct{}

func (system) Now() time.Time                   { return time.Now() }
func (system) NewTimer(d time.Duration) Timer   { return systemTimer{time.NewTimer(d)} }
func (system) NewTicker(d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time        { return s.t.C }
func (s systemTimer) Stop() bool                 { return s.t.Stop() }
func (s systemTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }

type systemTicker struct{ t *time.Ticker }

func (s systemTicker) C() <-chan time.Time { return s.t.C }
func (s systemTicker) Stop()               { s.t.Stop() }
