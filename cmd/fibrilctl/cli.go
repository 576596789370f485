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
	"strconv"
	"strings"
	"text/tabwriter"
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
	envFile              string // --env-file: read before the flags (withEnvFile)
}

// defaultGlobals are the built-in defaults overridden by the variables
// of envVars (from the environment or the env file); the flags override
// both.
func defaultGlobals(e *env) (globals, error) {
	g := globals{addr: "127.0.0.1:9876", admin: "127.0.0.1:8081", timeout: 10 * time.Second}
	for _, v := range []struct {
		name string
		dst  *string
	}{
		{"FIBRIL_ADDR", &g.addr}, {"FIBRIL_USER", &g.user}, {"FIBRIL_PASSWORD", &g.password}, {"FIBRIL_CA", &g.ca},
		{"FIBRIL_ADMIN_ADDR", &g.admin}, {"FIBRIL_ADMIN_USER", &g.adminUser}, {"FIBRIL_ADMIN_PASSWORD", &g.adminPass},
	} {
		if val := e.getenv(v.name); val != "" {
			*v.dst = val
		}
	}
	for _, v := range []struct {
		name string
		dst  *bool
	}{{"FIBRIL_TLS", &g.tls}, {"FIBRIL_INSECURE", &g.insecure}, {"FIBRIL_ADMIN_TLS", &g.adminTLS}} {
		if val := e.getenv(v.name); val != "" {
			b, err := strconv.ParseBool(val)
			if err != nil {
				return g, usagef("%s=%q (from %s) is not a boolean (true, false, 1, 0)", v.name, val, e.source(v.name))
			}
			*v.dst = b
		}
	}
	if val := e.getenv("FIBRIL_TIMEOUT"); val != "" {
		d, err := time.ParseDuration(val)
		if err != nil || d <= 0 {
			return g, usagef("FIBRIL_TIMEOUT=%q (from %s) is not a positive duration such as 10s", val, e.source("FIBRIL_TIMEOUT"))
		}
		g.timeout = d
	}
	return g, nil
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "broker `HOST:PORT` (comma-separated list to try in order; env FIBRIL_ADDR)")
	fs.StringVar(&g.user, "user", g.user, "username (env FIBRIL_USER; default: the built-in fibril/fibril pair, accepted from loopback only)")
	fs.StringVar(&g.password, "password", g.password, "password (env FIBRIL_PASSWORD)")
	fs.BoolVar(&g.tls, "tls", g.tls, "connect to the broker over TLS (env FIBRIL_TLS)")
	fs.StringVar(&g.ca, "ca", g.ca, "PEM `file` of CA certificates to trust for TLS (env FIBRIL_CA; default: the system roots)")
	fs.BoolVar(&g.insecure, "insecure", g.insecure, "TLS without verifying the server certificate, testing only (env FIBRIL_INSECURE)")
	fs.StringVar(&g.admin, "admin", g.admin, "admin API `HOST:PORT` (env FIBRIL_ADMIN_ADDR)")
	fs.StringVar(&g.adminUser, "admin-user", g.adminUser, "admin API username, HTTP Basic (env FIBRIL_ADMIN_USER)")
	fs.StringVar(&g.adminPass, "admin-password", g.adminPass, "admin API password (env FIBRIL_ADMIN_PASSWORD)")
	fs.BoolVar(&g.adminTLS, "admin-tls", g.adminTLS, "use HTTPS for the admin API, with --ca / --insecure (env FIBRIL_ADMIN_TLS)")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "bound on connecting and on each request (env FIBRIL_TIMEOUT)")
	fs.StringVar(&g.envFile, "env-file", g.envFile, "read unset FIBRIL_* variables from this `file` of KEY=VALUE lines (env "+envFileVar+"; default ~/.config/fibrilctl/env when it exists)")
	hideSecrets(fs)
}

// hideSecrets keeps the passwords' current values (from the environment
// or the env file) out of the defaults that help output shows.
func hideSecrets(fs *flag.FlagSet) {
	for _, name := range []string{"password", "admin-password"} {
		if f := fs.Lookup(name); f != nil {
			f.DefValue = ""
		}
	}
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
		{"queues", "ls | describe | messages | purge | delete | replay …", "see, inspect, purge, delete queues and streams; replay dead letters (admin API)", runQueues},
		{"repartition", "--topic T [--group G] --partitions N", "change a queue's partition count, in a cluster (admin API)", runRepartition},
		{"topology", "[--topic T] [--owners] [--json]", "show the broker's routing table (--owners: owner nodes, from the admin API)", runTopology},
		{"cluster", "[--json]", "list the cluster's nodes (admin API)", runCluster},
		{"peers", "[--json]", "probe every live peer over the inter-broker transport (admin API)", runPeers},
		{"settings", "get | set GROUP.KEY=VALUE ...", "show or change the runtime settings (admin API)", runSettings},
		{"users", "add NAME | passwd NAME | list | remove NAME | allow NAME | permissions NAME", "manage users, their passwords and permissions through the admin API", runUsers},
		{"bench", "[--topic T] [...]", "measure throughput and latency", runBench},
		{"plugins", "list | describe PATH", "list built-in and catalog plugins; describe a plugin binary", runPlugins},
		{"connections", "[--json]", "list the broker's client connections (admin API)", runConnections},
		{"drain", "[--node N] [--grace D] [--message M]", "drain a broker: GOING_AWAY to its clients, hand its partitions over (admin API)", runDrain},
		{"undrain", "[--node N]", "end a drain: the broker takes partitions and reports ready again (admin API)", runUndrain},
		{"completion", "bash | zsh | fish", "print a shell completion script", runCompletion},
		{"backup", "--out FILE [--node N]", "save a backup of the broker, taken while it serves (restore: fibril restore --from FILE)", runBackup},
		{"raft", "peers | remove-peer NODE | add-voter NODE [--raft-addr A] | demote NODE", "list or change the built-in raft group's members (admin API)", runRaft},
		{"log-level", "[LEVEL] [--node N] [--json]", "show or change the broker's log level while it runs (admin API)", runLogLevel},
		{"tls", "reload [--node N] [--json]", "reload the broker's TLS certificate from its files, as SIGHUP does (admin API)", runTLS},
		{"version", "[--json] [--client]", "print this CLI's build and the build of the broker at --admin", runVersion},
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fibrilctl [global flags] COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintf(tw, "  %s\t%s\t%s\n", "help", "", "print this list")
	_ = tw.Flush()
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
	fe, err := withEnvFile(e, args)
	if err == nil {
		var g globals
		if g, err = defaultGlobals(fe); err == nil {
			return runWith(ctx, args, fe, g)
		}
	}
	return report(e.stderr, "", err)
}

// runWith is run once the global defaults are known.
func runWith(ctx context.Context, args []string, e *env, g globals) int {
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
		if len(rest) > 1 { // help COMMAND is COMMAND --help
			for _, c := range commands {
				if c.name == rest[1] {
					return report(e.stderr, c.name, c.run(ctx, &g, e, []string{"--help"}))
				}
			}
		}
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
	prefix := "fibrilctl"
	if name != "" {
		prefix += " " + name
	}
	var ue *usageError
	if errors.As(err, &ue) {
		if name == "" {
			fmt.Fprintf(w, "%s: %v\n", prefix, err)
		} else {
			fmt.Fprintf(w, "%s: %v\n(run 'fibrilctl %s --help' for usage)\n", prefix, err, name)
		}
		return exitUsage
	}
	fmt.Fprintf(w, "%s: %s\n", prefix, describe(err))
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
	if fs.sink != nil {
		fs.sink(fs.FlagSet)
		return nil, errFlagsCollected
	}
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
	sink func(*flag.FlagSet) // env.flagSink
}

// errFlagsCollected is what a command returns when env.flagSink took its
// flag set instead of the command running.
var errFlagsCollected = errors.New("flags collected")

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
	hideSecrets(fs)
	fs.Usage = func() {} // the flag package calls it on errors too
	help := func() {
		fs.SetOutput(e.stdout)
		fmt.Fprintf(e.stdout, "usage: fibrilctl %s %s\n\nflags (global flags included):\n", name, args)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return &cmdFlags{fs, help, e.flagSink}
}

func sortedHeaderKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
