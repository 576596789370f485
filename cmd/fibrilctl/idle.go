package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core/client"
)

// idleResult is what `fibrilctl bench --mode idle` measured: the broker's
// memory, goroutines and CPU before and after N idle client connections,
// from its /metrics (after a garbage collection it asks for through
// /debug/pprof/heap?gc=1).
type idleResult struct {
	Connections int     `json:"connections"`
	OpenS       float64 `json:"open_s"` // opening and logging in all of them
	HoldS       float64 `json:"hold_s"` // the measured idle window
	// Per connection, from the differences.
	RSSPerConn        float64 `json:"rss_bytes_per_conn"`
	HeapPerConn       float64 `json:"heap_bytes_per_conn"`
	StackPerConn      float64 `json:"stack_bytes_per_conn"`
	GoroutinesPerConn float64 `json:"goroutines_per_conn"`
	// CPUAtRest is the broker's CPU over the idle window, in
	// milliseconds per second (1000 = one core).
	CPUAtRest float64            `json:"cpu_ms_per_s_at_rest"`
	Before    map[string]float64 `json:"before"`
	After     map[string]float64 `json:"after"`
}

// idleSeries are the /metrics series the idle bench reads.
var idleSeries = []string{"process_resident_memory_bytes", "go_memstats_heap_inuse_bytes",
	"go_memstats_stack_inuse_bytes", "go_goroutines", "process_cpu_seconds_total"}

// runIdle opens n client connections (HELLO and AUTH each, then nothing),
// holds them for hold, and reports what they cost the broker at --admin.
func runIdle(ctx context.Context, g *globals, e *env, opts client.Options, n int, hold time.Duration, asJSON bool) error {
	if n < 1 {
		return usagef("--connections must be at least 1")
	}
	if hold <= 0 {
		return usagef("--duration must be positive")
	}
	a, err := g.adminClient(e)
	if err != nil {
		return err
	}
	before, err := brokerMetrics(ctx, a)
	if err != nil {
		return err
	}
	began := time.Now()
	conns := make([]*client.Client, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := client.Dial(ctx, opts)
		if err != nil {
			return fmt.Errorf("connection %d of %d: %w", i+1, n, err)
		}
		conns = append(conns, c)
		if (i+1)%1000 == 0 {
			fmt.Fprintf(e.stderr, "%d connections open\n", i+1)
		}
	}
	opened := time.Since(began)
	time.Sleep(2 * time.Second) // handshakes settle; their buffers go back to the pools
	mid, err := brokerMetrics(ctx, a)
	if err != nil {
		return err
	}
	time.Sleep(hold)
	after, err := brokerMetrics(ctx, a)
	if err != nil {
		return err
	}
	per := func(k string) float64 { return (mid[k] - before[k]) / float64(n) }
	res := idleResult{Connections: n, OpenS: opened.Seconds(), HoldS: hold.Seconds(),
		RSSPerConn: per("process_resident_memory_bytes"), HeapPerConn: per("go_memstats_heap_inuse_bytes"),
		StackPerConn: per("go_memstats_stack_inuse_bytes"), GoroutinesPerConn: per("go_goroutines"),
		CPUAtRest: (after["process_cpu_seconds_total"] - mid["process_cpu_seconds_total"]) * 1000 / hold.Seconds(),
		Before:    before, After: mid}
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(res)
	}
	fmt.Fprintf(e.stdout, "idle connections  %d (opened and logged in in %.1fs), held %.0fs\n", n, res.OpenS, res.HoldS)
	fmt.Fprintf(e.stdout, "per connection    rss %.0f B  heap %.0f B  stacks %.0f B  goroutines %.2f\n",
		res.RSSPerConn, res.HeapPerConn, res.StackPerConn, res.GoroutinesPerConn)
	fmt.Fprintf(e.stdout, "broker at rest    %.1f ms of CPU per second\n", res.CPUAtRest)
	fmt.Fprintf(e.stdout, "broker            rss %.1f → %.1f MiB, goroutines %.0f → %.0f\n",
		before["process_resident_memory_bytes"]/(1<<20), mid["process_resident_memory_bytes"]/(1<<20),
		before["go_goroutines"], mid["go_goroutines"])
	return nil
}

// brokerMetrics has the broker collect its garbage, then reads the
// idleSeries from its /metrics.
func brokerMetrics(ctx context.Context, a *adminClient) (map[string]float64, error) {
	if _, err := a.text(ctx, "/debug/pprof/heap?gc=1"); err != nil {
		return nil, err
	}
	body, err := a.text(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(body, "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		for _, s := range idleSeries {
			if name == s {
				if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
					out[s] = v
				}
			}
		}
	}
	for _, s := range idleSeries {
		if _, ok := out[s]; !ok {
			return nil, fmt.Errorf("the broker's /metrics has no %s", s)
		}
	}
	return out, nil
}

// text GETs path from the admin API and returns the body as text.
func (a *adminClient) text(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return "", err
	}
	if a.user != "" {
		req.SetBasicAuth(a.user, a.pass)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("admin API %s: %w", a.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("admin API: read answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return "", &adminError{status: resp.StatusCode, message: strings.TrimSpace(string(data))}
	}
	return string(data), nil
}
