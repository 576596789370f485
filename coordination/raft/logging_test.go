package raft

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestHCLogAdapter(t *testing.T) {
	sink := &logSink{}
	l := newHCLog(slog.New(sink), "raft").Named("net").With("peer", "n2")
	l.Info("entering follower state", "term", 3)
	l.Trace("chatty")
	l.Log(hclog.Error, "failed to appendEntries", "error", "boom")
	l.StandardLogger(nil).Print("from the std logger")
	for _, want := range [][]string{
		{"INFO entering follower state", "logger=raft.net", "peer=n2", "term=3"},
		{"ERROR failed to appendEntries", "error=boom"},
		{"INFO from the std logger"},
	} {
		if !sink.contains(want...) {
			t.Errorf("no line with %q in %q", want, sink.lines)
		}
	}
	if !l.IsTrace() || l.GetLevel() != hclog.Trace || l.Name() != "raft.net" {
		t.Errorf("levels/name: trace %v level %v name %q", l.IsTrace(), l.GetLevel(), l.Name())
	}
	quiet := newHCLog(slog.New(slog.NewTextHandler(nil, &slog.HandlerOptions{Level: slog.LevelWarn})), "")
	if quiet.IsInfo() || !quiet.IsWarn() || quiet.GetLevel() != hclog.Warn {
		t.Errorf("warn-level logger: info %v warn %v level %v", quiet.IsInfo(), quiet.IsWarn(), quiet.GetLevel())
	}
}

func TestThrottle(t *testing.T) {
	th := newThrottle(time.Hour)
	if !th.allow("a") || th.allow("a") || !th.allow("b") {
		t.Fatal("throttle lets the wrong lines through")
	}
}

// raft reports its own orderly shutdown as an error; it is logged at debug.
func TestShutdownNoiseIsDebug(t *testing.T) {
	var buf bytes.Buffer
	a := newHCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), "raft-net")
	a.Error("failed to decode incoming command", "error", errors.New("transport shutdown"))
	if buf.Len() != 0 {
		t.Fatalf("shutdown noise logged at info or above: %s", buf.String())
	}
	a.Error("failed to decode incoming command", "error", errors.New("unexpected EOF"))
	if !strings.Contains(buf.String(), "level=ERROR") {
		t.Fatalf("a real error was not logged: %q", buf.String())
	}
}
