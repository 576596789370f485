package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/fibrilgo/fibril/plugins/internal/contract"
)

func TestInfoValidate(t *testing.T) {
	ok := Info{Name: "x", Version: "1", Config: []ConfigKey{{Name: "addr", Type: "string"}}}
	if err := ok.validate(KindCoordination); err != nil {
		t.Fatal(err)
	}
	if v := ok.servedVersions(KindCoordination); len(v) != 1 || v[0] != 1 {
		t.Fatalf("default served versions %v", v)
	}
	for _, bad := range []Info{
		{Version: "1"},
		{Name: "x"},
		{Name: "x", Version: "1", APIVersions: []int{0}},
		{Name: "x", Version: "1", Config: []ConfigKey{{Name: "a", Type: "float"}}},
		{Name: "x", Version: "1", Config: []ConfigKey{{Name: "a", Type: "int"}, {Name: "a", Type: "int"}}},
	} {
		if err := bad.validate(KindCoordination); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := ok.validate("storage"); err == nil {
		t.Error("unknown kind accepted")
	}
	// The host half of the round trip (back from proto) is tested in
	// plugins/host.
	p := Info{Name: "x", Version: "2", APIVersions: []int{3, 1, 3}, Config: ok.Config}.toProto(KindCoordination)
	if p.GetName() != "x" || p.GetKind() != KindCoordination || p.GetVersion() != "2" || len(p.GetApiVersions()) != 2 || p.GetApiVersions()[0] != 1 || p.GetConfig()[0].GetName() != "addr" || p.GetSdkVersion() != SDKVersion {
		t.Fatalf("to proto: %+v", p)
	}
}

// The plugin writes the JSON lines go-plugin's host parses: @level,
// @message, and @timestamp in the exact layout it accepts.
func TestPluginLogFormat(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(newPluginLogHandler(&buf, slog.LevelDebug))
	l.Debug("hello", "k", 1)
	l.Log(context.Background(), contract.LevelTrace, "dropped")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%q: %v", buf.String(), err)
	}
	if m["@level"] != "debug" || m["@message"] != "hello" || m["k"] != float64(1) {
		t.Fatalf("line %v", m)
	}
	if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", m["@timestamp"].(string)); err != nil {
		t.Fatal(err)
	}
	if strings.Count(buf.String(), "\n") != 1 {
		t.Fatalf("trace line written below the level: %q", buf.String())
	}
}

func TestHCLogBridge(t *testing.T) {
	var buf bytes.Buffer
	h := HCLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), "")
	if h.GetLevel() != hclog.Info || h.IsDebug() || !h.IsWarn() {
		t.Fatalf("level %v", h.GetLevel())
	}
	h.Named("plugin").With("pid", 7).Warn("exited", "code", 2)
	h.Debug("hidden")
	out := buf.String()
	for _, w := range []string{"level=WARN", "msg=exited", "logger=plugin", "pid=7", "code=2"} {
		if !strings.Contains(out, w) {
			t.Errorf("%q lacks %q", out, w)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Error("debug line kept at info level")
	}
	w := h.StandardWriter(nil)
	w.Write([]byte("one\ntw"))
	w.Write([]byte("o\n"))
	if !strings.Contains(buf.String(), "msg=one") || !strings.Contains(buf.String(), "msg=two") {
		t.Errorf("standard writer lines: %q", buf.String())
	}
}
