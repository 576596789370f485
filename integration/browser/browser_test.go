package browser

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The driver against a page of its own: navigate, read and change the DOM,
// wait, screenshot, and a Close that leaves no process of the group behind.
func TestDriver(t *testing.T) {
	bin, err := Find()
	if err != nil {
		if os.Getenv("FIBRIL_REQUIRE_BROWSER") == "1" {
			t.Fatalf("FIBRIL_REQUIRE_BROWSER=1: %v", err)
		}
		t.Skipf("no browser: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><title>t</title><p id="x">auth=` + r.Header.Get("Authorization") +
			`</p><button id="b" onclick="document.getElementById('x').textContent='clicked'">b</button>`))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := Launch(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	pid := b.PID()
	defer func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		if syscall.Kill(-pid, 0) == nil {
			t.Errorf("process group %d still has processes after Close", pid)
		}
	}()
	p, err := b.NewPage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetHeaders(ctx, map[string]string{"Authorization": "Basic eDp5"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ctx, "http://"+ln.Addr().String()+"/"); err != nil {
		t.Fatal(err)
	}
	var text string
	if err := p.Eval(ctx, `document.getElementById('x').textContent`, &text); err != nil || text != "auth=Basic eDp5" {
		t.Fatalf("text %q, %v", text, err)
	}
	if err := p.Eval(ctx, `document.getElementById('b').click()`, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitFor(ctx, 5*time.Second, "click", `document.getElementById('x').textContent === 'clicked'`); err != nil {
		t.Fatal(err)
	}
	if err := p.Eval(ctx, `nosuchname.x`, nil); err == nil {
		t.Fatal("a thrown exception is not an error")
	}
	shot := filepath.Join(t.TempDir(), "page.png")
	if err := p.Screenshot(ctx, shot); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(shot); err != nil || len(data) < 100 || string(data[1:4]) != "PNG" {
		t.Fatalf("screenshot: %d bytes, %v", len(data), err)
	}
}
