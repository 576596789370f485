package benchkit

import (
	"testing"
	"time"
)

func TestAdmitWaitsForDeliveries(t *testing.T) {
	var delivered padded
	g := newGate(4, &delivered)
	for i := 0; i < 4; i++ {
		if !g.admit() {
			t.Fatal("admit refused below the bound")
		}
	}
	admitted := make(chan bool)
	go func() { admitted <- g.admit() }()
	select {
	case <-admitted:
		t.Fatal("admitted beyond --max-ahead")
	case <-time.After(50 * time.Millisecond):
	}
	delivered.Add(1)
	g.wake()
	select {
	case ok := <-admitted:
		if !ok {
			t.Fatal("admit returned false")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a delivery did not wake the waiting producer")
	}
	go func() { admitted <- g.admit() }()
	time.Sleep(20 * time.Millisecond)
	g.stop()
	select {
	case ok := <-admitted:
		if ok {
			t.Fatal("admit after stop returned true")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not release the waiting producer")
	}
}

func TestReleaseGivesBackAnAdmission(t *testing.T) {
	var delivered padded
	g := newGate(1, &delivered)
	if !g.admit() {
		t.Fatal("first admit refused")
	}
	g.release() // its publish failed
	done := make(chan bool, 1)
	go func() { done <- g.admit() }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("admit returned false")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a released admission was not given back")
	}
	unbounded := newGate(0, &delivered)
	for range 1000 {
		if !unbounded.admit() {
			t.Fatal("unbounded gate refused")
		}
	}
	unbounded.stop()
	if unbounded.admit() {
		t.Fatal("unbounded gate admitted after stop")
	}
}
