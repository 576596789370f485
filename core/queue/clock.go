package queue

import "time"

// realClock is the production Clock: time.AfterFunc holds no goroutine
// while it waits, so an idle partition costs nothing.
type realClock struct{ now func() time.Time }

func (c realClock) Now() time.Time { return c.now() }

func (c realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
