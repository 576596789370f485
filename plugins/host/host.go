package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fibrilgo/fibril/plugins"
	"github.com/fibrilgo/fibril/plugins/internal/contract"
	"github.com/fibrilgo/fibril/plugins/pluginpb"
)

// ErrIncompatibleAPIVersion is wrapped by the error refusing a plugin that
// shares no API version with this broker.
var ErrIncompatibleAPIVersion = errors.New("no API version in common with the plugin")

// PluginHealth is implemented by what OpenCoordination returns for an
// external plugin (built-ins do not run in a process of their own). ok is
// false while the process is down or restarting; restarts counts launches
// after the first; lastErr is the latest failure (nil before any).
type PluginHealth interface {
	Health() (ok bool, restarts int, lastErr error)
}

// Option tunes how external plugins are run.
type Option func(*options)

type options struct {
	reg              prometheus.Registerer
	backoffMin       time.Duration
	backoffMax       time.Duration
	startTimeout     time.Duration
	configureTimeout time.Duration
	pollInterval     time.Duration
	healthInterval   time.Duration
}

func defaultOptions() options {
	return options{
		backoffMin:       100 * time.Millisecond,
		backoffMax:       5 * time.Second,
		startTimeout:     30 * time.Second,
		configureTimeout: 60 * time.Second,
		pollInterval:     100 * time.Millisecond,
		healthInterval:   5 * time.Second,
	}
}

// WithRegisterer registers the plugin metrics (fibril_plugin_up,
// fibril_plugin_restarts_total) with reg. Without it they are kept but not
// exported. Registering twice with one registry reuses the collectors.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) { o.reg = reg }
}

// WithRestartBackoff sets the delay before the first restart of a dead
// plugin and its ceiling (it doubles in between). Default 100 ms to 5 s.
func WithRestartBackoff(first, ceiling time.Duration) Option {
	return func(o *options) {
		if first > 0 {
			o.backoffMin = first
		}
		if ceiling >= o.backoffMin {
			o.backoffMax = ceiling
		}
	}
}

// WithTimeouts bounds a plugin's start (handshake) and its Configure (the
// backend's open). Defaults 30 s and 60 s.
func WithTimeouts(start, configure time.Duration) Option {
	return func(o *options) {
		if start > 0 {
			o.startTimeout = start
		}
		if configure > 0 {
			o.configureTimeout = configure
		}
	}
}

// metrics are shared by every plugin of one registry.
type metrics struct {
	restarts *prometheus.CounterVec
	up       *prometheus.GaugeVec
}

var (
	metricsMu    sync.Mutex
	metricsByReg = map[prometheus.Registerer]*metrics{}
)

func metricsFor(reg prometheus.Registerer) *metrics {
	metricsMu.Lock()
	defer metricsMu.Unlock()
	if m := metricsByReg[reg]; m != nil && reg != nil {
		return m
	}
	m := &metrics{
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fibril_plugin_restarts_total",
			Help: "Launches of an external plugin after its first one (each attempt to replace a dead or hung process).",
		}, []string{"kind", "name"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fibril_plugin_up",
			Help: "1 while an external plugin process is running and configured, 0 while it is down or restarting.",
		}, []string{"kind", "name"}),
	}
	if reg == nil {
		return m
	}
	if err := reg.Register(m.restarts); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if c, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				m.restarts = c
			}
		}
	}
	if err := reg.Register(m.up); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if g, ok := are.ExistingCollector.(*prometheus.GaugeVec); ok {
				m.up = g
			}
		}
	}
	metricsByReg[reg] = m
	return m
}

// supervisor runs one external plugin process: it launches it, watches
// it, and replaces it when it dies or stops answering. While no process is
// ready, current fails with ErrCoordinationUnavailable (for coordination).
type supervisor struct {
	kind  string
	entry *CatalogEntry
	log   *slog.Logger
	opts  options
	m     *metrics
	// kindPlugin is the go-plugin client side of the kind.
	kindPlugin plugin.Plugin
	// setup prepares a freshly launched process (the kind's client, the
	// negotiated API version) before it takes calls.
	setup func(ctx context.Context, kindClient any, apiVersion int) error
	// unavailable builds the error of a call made while no process is
	// ready.
	unavailable func(lastErr error) error

	mu       sync.Mutex
	proc     *launched
	restarts int
	lastErr  error
	closed   bool
	stop     chan struct{}
	done     chan struct{}
}

// launched is one running, configured plugin process.
type launched struct {
	pc         *plugin.Client
	rpc        plugin.ClientProtocol
	kindClient any
	info       PluginInfo
	pid        int
}

func (s *supervisor) labels() prometheus.Labels {
	return prometheus.Labels{"kind": s.kind, "name": s.entry.Name}
}

// start launches the first process; a failure here is the caller's
// (the broker refuses to start), later ones are retried.
func (s *supervisor) start(ctx context.Context) error {
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	s.m.up.With(s.labels()).Set(0)
	s.m.restarts.With(s.labels()).Add(0)
	p, err := s.launch(ctx)
	if err != nil {
		close(s.done)
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	s.m.up.With(s.labels()).Set(1)
	go s.run()
	return nil
}

// current returns the ready process's kind client, or the unavailable
// error.
func (s *supervisor) current() (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil, s.unavailable(s.lastErr)
	}
	return s.proc.kindClient, nil
}

// Health implements PluginHealth.
func (s *supervisor) Health() (ok bool, restarts int, lastErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil, s.restarts, s.lastErr
}

// pid is the running process's id (0 when none), for tests.
func (s *supervisor) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid
}

// launch verifies, starts, handshakes, describes and sets up one process.
func (s *supervisor) launch(ctx context.Context) (*launched, error) {
	e := s.entry
	if err := e.Verify(); err != nil {
		return nil, err
	}
	sum, _ := hex.DecodeString(e.SHA256)
	cmd := exec.Command(e.Command, e.Args...)
	cmd.Env = []string{contract.EnvLogLevel + "=" + contract.LevelName(lowestLevel(s.log))}
	versions := map[int]plugin.PluginSet{}
	for _, v := range plugins.APIVersions(s.kind) {
		versions[v] = plugin.PluginSet{s.kind: s.kindPlugin, contract.InfoPluginName: &contract.Info{}}
	}
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  contract.Handshake,
		VersionedPlugins: versions,
		Cmd:              cmd,
		// Verify hashed the file already and named both digests on a
		// mismatch; go-plugin checks again right before exec, which
		// narrows the window for a swap between the two.
		SecureConfig:     &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     s.opts.startTimeout,
		Logger:           plugins.HCLog(s.log, ""),
		SyncStdout:       contract.NewLineLogger(s.log, slog.LevelInfo, "plugin stdout"),
		SyncStderr:       contract.NewLineLogger(s.log, slog.LevelInfo, "plugin stderr"),
	})
	fail := func(err error) (*launched, error) {
		pc.Kill()
		return nil, err
	}
	rpc, err := pc.Client()
	if err != nil {
		return fail(s.startError(err))
	}
	p := &launched{pc: pc, rpc: rpc}
	if rc := pc.ReattachConfig(); rc != nil {
		p.pid = rc.Pid
	}
	raw, err := rpc.Dispense(contract.InfoPluginName)
	if err != nil {
		return fail(fmt.Errorf("%s plugin %q: %w", s.kind, e.Name, err))
	}
	ictx, cancel := context.WithTimeout(ctx, s.opts.startTimeout)
	resp, err := raw.(pluginpb.PluginClient).PluginInfo(ictx, &pluginpb.PluginInfoRequest{})
	cancel()
	if err != nil {
		return fail(fmt.Errorf("%s plugin %q: PluginInfo: %w", s.kind, e.Name, err))
	}
	p.info = pluginInfoFromProto(resp)
	if p.info.Kind != s.kind {
		return fail(fmt.Errorf("%s: %s is a %s plugin (%s), not a %s plugin; refusing it", e.where(), e.Command, p.info.Kind, p.info, s.kind))
	}
	if p.info.Version != e.Version {
		s.log.Warn("plugin reports another version than its catalog entry", "catalog_version", e.Version, "plugin_version", p.info.Version)
	}
	if p.kindClient, err = rpc.Dispense(s.kind); err != nil {
		return fail(fmt.Errorf("%s plugin %q: %w", s.kind, e.Name, err))
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.configureTimeout)
	err = s.setup(cctx, p.kindClient, pc.NegotiatedVersion())
	cancel()
	if err != nil {
		return fail(fmt.Errorf("%s plugin %q: %w", s.kind, e.Name, err))
	}
	s.log.Info("plugin started", "pid", p.pid, "plugin_name", p.info.Name, "version", p.info.Version,
		"api_version", pc.NegotiatedVersion(), "command", e.Command)
	return p, nil
}

var pluginVersionRE = regexp.MustCompile(`Plugin version: (\d+)`)

// startError explains a failed handshake; go-plugin's own message for a
// version mismatch does not say what to do about it.
func (s *supervisor) startError(err error) error {
	e := s.entry
	if m := pluginVersionRE.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s: %w: %s serves %s API version %s, this broker supports %v; use a plugin release built for one of those",
			e.where(), ErrIncompatibleAPIVersion, e.Command, s.kind, m[1], plugins.APIVersions(s.kind))
	}
	return fmt.Errorf("%s: start %s: %w", e.where(), e.Command, err)
}

// run watches the process and replaces it when it dies, until close.
func (s *supervisor) run() {
	defer close(s.done)
	for {
		cause, ok := s.watch()
		if !ok {
			return
		}
		s.mu.Lock()
		old := s.proc
		s.proc = nil
		s.lastErr = cause
		s.mu.Unlock()
		s.m.up.With(s.labels()).Set(0)
		s.log.Error("plugin down; restarting it", "error", cause)
		go old.pc.Kill() // reap; it is dead or killed already
		backoff := s.opts.backoffMin
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(backoff):
			}
			s.mu.Lock()
			s.restarts++
			s.mu.Unlock()
			s.m.restarts.With(s.labels()).Inc()
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				select {
				case <-s.stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			p, err := s.launch(ctx)
			cancel()
			if err == nil {
				s.mu.Lock()
				if s.closed {
					s.mu.Unlock()
					p.pc.Kill()
					return
				}
				s.proc = p
				s.mu.Unlock()
				s.m.up.With(s.labels()).Set(1)
				break
			}
			s.mu.Lock()
			s.lastErr = err
			s.mu.Unlock()
			s.log.Error("plugin restart failed", "error", err, "retry_in", min(2*backoff, s.opts.backoffMax))
			backoff = min(2*backoff, s.opts.backoffMax)
		}
	}
}

// watch blocks until the process exits or stops answering health checks
// (three in a row; it is then killed), returning why; ok is false when
// the supervisor was closed instead.
func (s *supervisor) watch() (cause error, ok bool) {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	poll := time.NewTicker(s.opts.pollInterval)
	defer poll.Stop()
	lastCheck := time.Now()
	failures := 0
	for {
		select {
		case <-s.stop:
			return nil, false
		case <-poll.C:
		}
		if p.pc.Exited() {
			return fmt.Errorf("%s plugin %q: process %d exited", s.kind, s.entry.Name, p.pid), true
		}
		if time.Since(lastCheck) < s.opts.healthInterval {
			continue
		}
		lastCheck = time.Now()
		if err := s.ping(p); err != nil {
			failures++
			s.log.Warn("plugin health check failed", "error", err, "failures", failures)
			if failures >= 3 {
				if p.pid > 0 {
					// os.Process.Kill is SIGKILL on Unix and TerminateProcess
					// on Windows.
					if proc, err := os.FindProcess(p.pid); err == nil {
						_ = proc.Kill()
					}
				}
				return fmt.Errorf("%s plugin %q: process %d stopped answering (%v); killed it", s.kind, s.entry.Name, p.pid, err), true
			}
			continue
		}
		failures = 0
	}
}

// ping is go-plugin's gRPC health check, bounded.
func (s *supervisor) ping(p *launched) error {
	gc, ok := p.rpc.(*plugin.GRPCClient)
	if !ok {
		return p.rpc.Ping()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.healthInterval)
	defer cancel()
	_, err := grpc_health_v1.NewHealthClient(gc.Conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName})
	return err
}

// close stops watching and stops the process (gracefully: go-plugin asks
// it to shut down, and kills it after two seconds).
func (s *supervisor) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	if p != nil {
		p.pc.Kill()
	}
	s.m.up.With(s.labels()).Set(0)
}

// lowestLevel is the lowest slog level l keeps, passed to the plugin so
// that it formats only lines the broker will keep.
func lowestLevel(l *slog.Logger) slog.Level {
	for _, lv := range []slog.Level{contract.LevelTrace, slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
		if l.Enabled(context.Background(), lv) {
			return lv
		}
	}
	return slog.LevelError
}
