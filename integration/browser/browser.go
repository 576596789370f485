// Package browser drives a headless Chromium over the DevTools protocol
// for the integration tests: launch it (on loopback only, with its
// background networking off), open a page, navigate, evaluate JavaScript
// to read and act on the DOM, wait for a condition, take screenshots, and
// stop it by its process group. Only tests import it.
package browser

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Find returns the path of a Chromium (or Chrome) binary: $FIBRIL_CHROMIUM
// when set, else the first of the usual names on $PATH.
func Find() (string, error) {
	if p := os.Getenv("FIBRIL_CHROMIUM"); p != "" {
		return exec.LookPath(p)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium on $PATH (install it: apt-get install -y chromium)")
}

// Browser is one running Chromium and its DevTools connection.
type Browser struct {
	cmd    *exec.Cmd
	dir    string
	ws     *wsConn
	done   chan struct{} // closed when the process has exited
	stderr *tail

	nextID  atomic.Int64
	mu      sync.Mutex
	pending map[int64]chan message
	waiters []*waiter
	readErr error
	closed  chan struct{} // closed when the reader stopped
	errs    []string      // uncaught exceptions and console errors, any page
}

type message struct {
	ID        int64           `json:"id,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

type waiter struct {
	session, method string
	ch              chan json.RawMessage
}

var listening = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// Launch starts Chromium headless with a fresh profile in a temporary
// directory and connects to its DevTools endpoint, within ctx.
func Launch(ctx context.Context, bin string) (*Browser, error) {
	dir, err := os.MkdirTemp("", "fibril-chromium-")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--headless=new", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
		"--user-data-dir=" + dir, "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
		"--disable-background-networking", "--disable-component-update", "--disable-default-apps",
		"--disable-domain-reliability", "--disable-client-side-phishing-detection", "--metrics-recording-only",
		"--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
		// Nothing but loopback: every host name fails to resolve.
		"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
		"--window-size=1280,900", "--hide-scrollbars", "--mute-audio",
		"about:blank",
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = io.Discard
	pr, err := cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	b := &Browser{cmd: cmd, dir: dir, done: make(chan struct{}), stderr: &tail{},
		pending: map[int64]chan message{}, closed: make(chan struct{})}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			b.stderr.add(line)
			if m := listening.FindStringSubmatch(line); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		close(b.done)
	}()
	var wsURL string
	select {
	case wsURL = <-found:
	case <-b.done:
		b.Close()
		return nil, fmt.Errorf("chromium exited before it listened: %s", b.Stderr())
	case <-ctx.Done():
		b.Close()
		return nil, fmt.Errorf("chromium did not print its DevTools address: %w; stderr: %s", ctx.Err(), b.Stderr())
	}
	if b.ws, err = dialWS(wsURL, 10*time.Second); err != nil {
		b.Close()
		return nil, err
	}
	go b.read()
	return b, nil
}

// PID is the browser's process id (the leader of its process group).
func (b *Browser) PID() int { return b.cmd.Process.Pid }

// Stderr returns the browser's last lines of standard error.
func (b *Browser) Stderr() string { return b.stderr.String() }

// Close asks the browser to exit, then kills its process group (the
// browser and every helper process it started) and waits for it, bounded,
// and removes the profile directory.
func (b *Browser) Close() error {
	if b.ws != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = b.call(ctx, "", "Browser.close", nil)
		cancel()
		_ = b.ws.Close()
	}
	select {
	case <-b.done:
	case <-time.After(3 * time.Second):
	}
	// The group, not only the leader: renderers and the zygote are its
	// children and share the group (Setpgid at launch).
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	var err error
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		err = fmt.Errorf("chromium (pid %d) did not exit after SIGKILL", b.cmd.Process.Pid)
	}
	// Helpers that outlive the leader for a moment are in the group too.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(-b.cmd.Process.Pid, 0) != nil {
			break
		}
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	}
	os.RemoveAll(b.dir)
	return err
}

// read dispatches the DevTools messages: answers to their callers, events
// to the waiters registered for them.
func (b *Browser) read() {
	defer close(b.closed)
	for {
		raw, err := b.ws.ReadMessage()
		if err != nil {
			b.mu.Lock()
			b.readErr = err
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var m message
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch := b.pending[m.ID]; ch != nil {
				ch <- m
				delete(b.pending, m.ID)
			}
		} else if m.Method != "" {
			b.noteError(m)
			kept := b.waiters[:0]
			for _, w := range b.waiters {
				if w.method == m.Method && w.session == m.SessionID {
					w.ch <- m.Params
					continue
				}
				kept = append(kept, w)
			}
			b.waiters = kept
		}
		b.mu.Unlock()
	}
}

// noteError keeps what a page reported as an error: an uncaught
// exception or console.error (b.mu held).
func (b *Browser) noteError(m message) {
	switch m.Method {
	case "Runtime.exceptionThrown":
		var e struct {
			Details struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		_ = json.Unmarshal(m.Params, &e)
		b.errs = append(b.errs, strings.TrimSpace(e.Details.Text+" "+e.Details.Exception.Description))
	case "Runtime.consoleAPICalled":
		var c struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(m.Params, &c)
		if c.Type == "error" {
			var parts []string
			for _, a := range c.Args {
				parts = append(parts, fmt.Sprint(a.Value, a.Description))
			}
			b.errs = append(b.errs, "console.error: "+strings.Join(parts, " "))
		}
	}
}

// Errors returns the uncaught exceptions and console errors the pages
// reported so far.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// call sends one command (on a page's session, or the browser's when
// session is "") and waits for its answer within ctx.
func (b *Browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	id := b.nextID.Add(1)
	req := map[string]any{"id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	if session != "" {
		req["sessionId"] = session
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ch := make(chan message, 1)
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: devtools connection closed: %w", method, b.readErr)
	}
	b.pending[id] = ch
	b.mu.Unlock()
	if err := b.ws.WriteText(raw); err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("%s: devtools connection closed", method)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		return m.Result, nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// await registers for the next event method on session; register before
// sending the command that causes it.
func (b *Browser) await(session, method string) <-chan json.RawMessage {
	w := &waiter{session: session, method: method, ch: make(chan json.RawMessage, 1)}
	b.mu.Lock()
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	return w.ch
}

// Page is one tab, attached on a session of its own.
type Page struct {
	b       *Browser
	session string
}

// NewPage opens a blank tab, 1280×900 CSS pixels (see Viewport).
func (b *Browser) NewPage(ctx context.Context) (*Page, error) {
	res, err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err != nil {
		return nil, err
	}
	var t struct {
		TargetID string `json:"targetId"`
	}
	if err := json.Unmarshal(res, &t); err != nil {
		return nil, err
	}
	res, err = b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": t.TargetID, "flatten": true})
	if err != nil {
		return nil, err
	}
	var a struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(res, &a); err != nil {
		return nil, err
	}
	p := &Page{b: b, session: a.SessionID}
	for _, m := range []string{"Page.enable", "Runtime.enable", "Network.enable"} {
		if _, err := b.call(ctx, p.session, m, nil); err != nil {
			return nil, err
		}
	}
	return p, p.Viewport(ctx, 1280, 900, false)
}

// Viewport sets the page's size; mobile emulates a phone.
func (p *Page) Viewport(ctx context.Context, width, height int, mobile bool) error {
	scale := 1.0
	if mobile {
		scale = 2
	}
	_, err := p.b.call(ctx, p.session, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": width, "height": height, "deviceScaleFactor": scale, "mobile": mobile})
	return err
}

// ColorScheme emulates prefers-color-scheme: "light" or "dark".
func (p *Page) ColorScheme(ctx context.Context, scheme string) error {
	_, err := p.b.call(ctx, p.session, "Emulation.setEmulatedMedia", map[string]any{
		"features": []map[string]string{{"name": "prefers-color-scheme", "value": scheme}}})
	return err
}

// Type inserts text at the focused element as if typed (input events
// fire).
func (p *Page) Type(ctx context.Context, text string) error {
	_, err := p.b.call(ctx, p.session, "Input.insertText", map[string]any{"text": text})
	return err
}

// SetHeaders adds headers to every request of the page (an Authorization
// header, say).
func (p *Page) SetHeaders(ctx context.Context, h map[string]string) error {
	_, err := p.b.call(ctx, p.session, "Network.setExtraHTTPHeaders", map[string]any{"headers": h})
	return err
}

// Navigate loads url and waits for its load event.
func (p *Page) Navigate(ctx context.Context, url string) error {
	loaded := p.b.await(p.session, "Page.loadEventFired")
	res, err := p.b.call(ctx, p.session, "Page.navigate", map[string]any{"url": url})
	if err != nil {
		return err
	}
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	_ = json.Unmarshal(res, &nav)
	if nav.ErrorText != "" {
		return fmt.Errorf("navigate %s: %s", url, nav.ErrorText)
	}
	select {
	case <-loaded:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("navigate %s: no load event: %w", url, ctx.Err())
	}
}

// Eval evaluates a JavaScript expression in the page (awaiting a promise)
// and decodes its value into out (nil: ignore it). A thrown exception is
// an error.
func (p *Page) Eval(ctx context.Context, expr string, out any) error {
	res, err := p.b.call(ctx, p.session, "Runtime.evaluate", map[string]any{
		"expression": expr, "returnByValue": true, "awaitPromise": true, "userGesture": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if r.Exception != nil {
		return fmt.Errorf("javascript: %s %s", r.Exception.Text, r.Exception.Exception.Description)
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// WaitFor evaluates expr every 100 ms until it is truthy or timeout
// passes; the error names what and shows the last evaluation error.
func (p *Page) WaitFor(ctx context.Context, timeout time.Duration, what, expr string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		var ok bool
		ectx, ecancel := context.WithTimeout(ctx, 5*time.Second)
		last = p.Eval(ectx, "!!("+expr+")", &ok)
		ecancel()
		if last == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%s: not within %v (last error: %v)", what, timeout, last)
			}
			return fmt.Errorf("%s: not within %v", what, timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Screenshot saves a PNG of the whole page (beyond the viewport) to path.
func (p *Page) Screenshot(ctx context.Context, path string) error {
	res, err := p.b.call(ctx, p.session, "Page.getLayoutMetrics", nil)
	if err != nil {
		return err
	}
	var m struct {
		Content struct {
			Width  float64 `json:"width"`
			Height float64 `json:"height"`
		} `json:"cssContentSize"`
	}
	if err := json.Unmarshal(res, &m); err != nil {
		return err
	}
	params := map[string]any{"format": "png", "captureBeyondViewport": true}
	if m.Content.Width > 0 && m.Content.Height > 0 {
		params["clip"] = map[string]any{"x": 0, "y": 0, "width": m.Content.Width, "height": min(m.Content.Height, 8000), "scale": 1}
	}
	res, err = p.b.call(ctx, p.session, "Page.captureScreenshot", params)
	if err != nil {
		return err
	}
	var shot struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(res, &shot); err != nil {
		return err
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

// tail keeps the last lines written to it.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > 50 {
		t.lines = t.lines[len(t.lines)-50:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
