package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core/client"
	"github.com/fibrilgo/fibril/core/wire"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// globals are the flags every command accepts.
type globals struct {
	addr, user, password string
	tls, insecure        bool
	ca                   string
	admin                string
	adminUser, adminPass string
	adminTLS             bool
	timeout              time.Duration
}

func defaultGlobals(e *env) globals {
	g := globals{addr: "127.0.0.1:9876", admin: "127.0.0.1:8081", timeout: 10 * time.Second}
	if v := e.getenv("FIBRIL_ADDR"); v != "" {
		g.addr = v
	}
	if v := e.getenv("FIBRIL_ADMIN_ADDR"); v != "" {
		g.admin = v
	}
	return g
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "broker `HOST:PORT` (comma-separated list to try in order; env FIBRIL_ADDR)")
	fs.StringVar(&g.user, "user", g.user, "username (default: the built-in fibril/fibril pair, accepted from loopback only)")
	fs.StringVar(&g.password, "password", g.password, "password (env FIBRIL_PASSWORD)")
	fs.BoolVar(&g.tls, "tls", g.tls, "connect to the broker over TLS")
	fs.StringVar(&g.ca, "ca", g.ca, "PEM `file` of CA certificates to trust for TLS (default: the system roots)")
	fs.BoolVar(&g.insecure, "insecure", g.insecure, "TLS without verifying the server certificate (testing only)")
	fs.StringVar(&g.admin, "admin", g.admin, "admin API `HOST:PORT` (env FIBRIL_ADMIN_ADDR)")
	fs.StringVar(&g.adminUser, "admin-user", g.adminUser, "admin API username (HTTP Basic)")
	fs.StringVar(&g.adminPass, "admin-password", g.adminPass, "admin API password (env FIBRIL_ADMIN_PASSWORD)")
	fs.BoolVar(&g.adminTLS, "admin-tls", g.adminTLS, "use HTTPS for the admin API (with --ca / --insecure)")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "bound on connecting and on each request")
}

// tlsConfig builds the TLS configuration of --tls / --admin-tls.
func (g *globals) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: g.insecure}
	if g.ca != "" {
		pem, err := os.ReadFile(g.ca)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca %s: no PEM certificate found", g.ca)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// clientOptions turns the globals into client options.
func (g *globals) clientOptions(e *env) (client.Options, error) {
	o := client.Options{
		Username: g.user, Password: g.password,
		ClientName: "fibrilctl", DialTimeout: g.timeout, OperationTimeout: g.timeout,
	}
	for _, a := range strings.Split(g.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.Addrs = append(o.Addrs, a)
		}
	}
	if len(o.Addrs) == 0 {
		return o, usagef("--addr is empty")
	}
	if o.Password == "" {
		o.Password = e.getenv("FIBRIL_PASSWORD")
	}
	if o.Username == "" && o.Password == "" {
		o.Username, o.Password = "fibril", "fibril"
	}
	if g.tls {
		cfg, err := g.tlsConfig()
		if err != nil {
			return o, err
		}
		o.TLS = cfg
	}
	return o, nil
}

// dial connects with the global options, bounded by --timeout.
func (g *globals) dial(ctx context.Context, e *env) (*client.Client, error) {
	opts, err := g.clientOptions(e)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	c, err := client.Dial(dctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", g.addr, err)
	}
	return c, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// command is one subcommand.
type command struct {
	name, args, summary string
	run                 func(ctx context.Context, g *globals, e *env, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"declare", "--topic T [--stream] [...]", "declare a queue (or a stream with --stream)", runDeclare},
		{"publish", "--topic T [...] [MESSAGE]", "publish a message (from the argument or stdin)", runPublish},
		{"consume", "--topic T [...]", "print deliveries and settle them", runConsume},
		{"topology", "[--topic T] [--owners] [--json]", "show the broker's routing table (--owners: owner nodes, from the admin API)", runTopology},
		{"cluster", "[--json]", "list the cluster's nodes (admin API)", runCluster},
		{"peers", "[--json]", "probe every live peer over the inter-broker transport (admin API)", runPeers},
		{"settings", "get | set GROUP.KEY=VALUE ...", "show or change the runtime settings (admin API)", runSettings},
		{"users", "add NAME | list | remove NAME", "manage users through the admin API", runUsers},
		{"bench", "[--topic T] [...]", "measure throughput and latency", runBench},
		{"plugins", "list | describe PATH", "list built-in and catalog plugins; describe a plugin binary", runPlugins},
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fibrilctl [global flags] COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %-32s %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintln(w, "\nglobal flags (accepted before or after the command):")
	g := globals{addr: "127.0.0.1:9876", admin: "127.0.0.1:8081", timeout: 10 * time.Second}
	fs := flag.NewFlagSet("fibrilctl", flag.ContinueOnError)
	g.register(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nRun 'fibrilctl COMMAND --help' for the flags of a command. Exit codes: 0 ok, 1 failure, 2 usage.")
}

// run parses the command line and runs the command; it returns the exit
// code.
func run(ctx context.Context, args []string, e *env) int {
	g := defaultGlobals(e)
	top := flag.NewFlagSet("fibrilctl", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(e.stdout)
			return exitOK
		}
		fmt.Fprintf(e.stderr, "fibrilctl: %v\n", err)
		printUsage(e.stderr)
		return exitUsage
	}
	rest := top.Args()
	if len(rest) == 0 {
		printUsage(e.stderr)
		return exitUsage
	}
	name := rest[0]
	if name == "help" {
		printUsage(e.stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(ctx, &g, e, rest[1:])
		return report(e.stderr, name, err)
	}
	fmt.Fprintf(e.stderr, "fibrilctl: unknown command %q\n", name)
	printUsage(e.stderr)
	return exitUsage
}

// report prints err (if any) and returns the exit code.
func report(w io.Writer, name string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "fibrilctl %s: %v\n(run 'fibrilctl %s --help' for usage)\n", name, err, name)
		return exitUsage
	}
	fmt.Fprintf(w, "fibrilctl %s: %s\n", name, describe(err))
	return exitFail
}

var codeNames = map[uint16]string{
	wire.CodeUnsupportedVersion: "unsupported_version",
	wire.CodeBadRequest:         "bad_request",
	wire.CodeUnauthorized:       "unauthorized",
	wire.CodeForbidden:          "forbidden",
	wire.CodeNotFound:           "not_found",
	wire.CodeConflict:           "conflict",
	wire.CodePayloadTooLarge:    "payload_too_large",
	wire.CodeTLSRequired:        "tls_required",
	wire.CodeInternal:           "internal",
	wire.CodeUnavailable:        "unavailable",
	wire.CodeOutcomeUnknown:     "outcome_unknown",
}

// describe renders an error, spelling out a broker refusal (wire code and
// message) and adding a hint for the usual mistakes.
func describe(err error) string {
	msg := err.Error()
	var ce *client.Error
	if errors.As(err, &ce) {
		name := codeNames[ce.Code]
		if name == "" {
			name = "unknown code"
		}
		msg += fmt.Sprintf("\n  broker error: op %s, code %d (%s), message %q", ce.Op, ce.Code, name, ce.Message)
		switch ce.Code {
		case wire.CodeUnauthorized:
			msg += "\n  hint: check --user/--password (the built-in fibril/fibril pair works from loopback only)"
		case wire.CodeTLSRequired:
			msg += "\n  hint: the broker only speaks TLS: add --tls (and --ca or --insecure)"
		}
	}
	var ae *adminError
	if errors.As(err, &ae) && ae.status == 401 {
		msg += "\n  hint: the admin API needs --admin-user/--admin-password"
	}
	switch {
	case errors.Is(err, client.ErrTLSRequired) && ce == nil:
		msg += "\n  hint: add --tls"
	case errors.Is(err, client.ErrOutcomeUnknown):
		msg += "\n  note: the request was sent but its outcome is unknown (it may have taken effect)"
	case strings.Contains(msg, "connection refused"):
		msg += "\n  hint: is a broker listening there? (--addr, env FIBRIL_ADDR)"
	}
	return msg
}

// parseNoArgs is parseArgs for a command that takes no positional
// argument: one is a usage error.
func parseNoArgs(fs *cmdFlags, args []string) error {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	return nil
}

// parseArgs parses flags that may be interleaved with positional
// arguments ("--" ends the flags) and returns the positional ones.
func parseArgs(fs *cmdFlags, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.help()
				return nil, err
			}
			return nil, &usageError{err.Error()}
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// cmdFlags is a command's flag set and its --help printer.
type cmdFlags struct {
	*flag.FlagSet
	help func()
}

// newFlagSet makes a command's flag set with the global flags included
// (but those named in skip, which the command defines itself).
func newFlagSet(name, args string, g *globals, e *env, skip ...string) *cmdFlags {
	fs := flag.NewFlagSet("fibrilctl "+name, flag.ContinueOnError)
	// The flag package prints errors and usage itself; parseArgs reports
	// errors once, and prints the usage only when --help asks for it.
	fs.SetOutput(io.Discard)
	tmp := flag.NewFlagSet("", flag.ContinueOnError)
	g.register(tmp)
	tmp.VisitAll(func(f *flag.Flag) {
		if !slices.Contains(skip, f.Name) {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	fs.Usage = func() {} // the flag package calls it on errors too
	help := func() {
		fs.SetOutput(e.stdout)
		fmt.Fprintf(e.stdout, "usage: fibrilctl %s %s\n\nflags (global flags included):\n", name, args)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return &cmdFlags{fs, help}
}

func sortedHeaderKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
