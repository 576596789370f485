package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/fibrilgo/fibril/core/broker"
	"github.com/fibrilgo/fibril/core/buildinfo"
	"github.com/fibrilgo/fibril/core/config"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // an I/O failure, such as an unwritable -o file
	exitUsage = 2 // bad configuration or command line
)

// stdin is where `fibril auth hash-password` reads a piped password (a
// variable so tests can feed it).
var stdin io.Reader = os.Stdin

// run is main without the process: arguments, environment and streams are
// passed in so tests can drive every subcommand.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version":
			fmt.Fprintln(stdout, versionString())
			return exitOK
		case "help":
			usage(stdout)
			return exitOK
		case "config":
			return runConfig(args[1:], environ, stdout, stderr)
		case "dev":
			return runDev(ctx, args[1:], environ, stdout, stderr)
		case "health":
			return runHealth(ctx, args[1:], environ, stdout, stderr)
		case "auth":
			return runAuth(ctx, args[1:], stdin, stdout, stderr)
		case "raft":
			return runRaft(args[1:], environ, stdout, stderr)
		case "restore":
			return runRestore(args[1:], environ, stdout, stderr)
		}
	}
	return serve(ctx, args, environ, stdout, stderr)
}

// serve loads the configuration and runs the broker until ctx ends (main
// ends it on SIGINT or SIGTERM), then shuts it down gracefully
// (GOING_AWAY, in-flight confirms answered, logs flushed) and exits 0.
// SIGHUP meanwhile reloads the TLS material.
func serve(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	cfg, logger, level, code := load(args, environ, stdout, stderr)
	if cfg == nil {
		return code
	}
	b, err := broker.Start(cfg, logger)
	if err != nil {
		logger.Error("cannot start", "err", err)
		return exitError
	}
	b.SetLogLevelVar(level)
	// Under systemd (Type=notify): ready once Start returned, with the
	// client listener open; stopping as soon as the shutdown begins.
	notify := systemdNotifier(environ, logger)
	notify("READY=1\nSTATUS=serving clients on " + b.BrokerAddr().String())
	defer context.AfterFunc(ctx, func() { notify("STOPPING=1\nSTATUS=shutting down") })()
	reloadOnHangup(ctx, b.ReloadTLS, logger)
	if err := b.Run(ctx); err != nil {
		logger.Error("shutdown", "err", err)
		return exitError
	}
	return exitOK
}

// runConfig handles "fibril config SUBCOMMAND".
func runConfig(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "fibril config: missing subcommand (print, check, example, docs)")
		return exitUsage
	}
	switch args[0] {
	case "print":
		return loadAndPrint(args[1:], environ, stdout, stderr, true)
	case "check":
		code := loadAndPrint(args[1:], environ, stdout, stderr, false)
		if code == exitOK {
			fmt.Fprintln(stdout, "configuration OK")
		}
		return code
	case "example":
		return generate(args[1:], stdout, stderr, config.WriteExample)
	case "docs":
		return generate(args[1:], stdout, stderr, config.WriteDocs)
	}
	fmt.Fprintf(stderr, "fibril config: unknown subcommand %q (print, check, example, docs)\n", args[0])
	return exitUsage
}

// loadAndPrint loads the configuration, logs its warnings and either
// prints it or reports every problem.
func loadAndPrint(args, environ []string, stdout, stderr io.Writer, print bool) int {
	cfg, ld, err := config.Load(args, environ)
	if errors.Is(err, config.ErrHelp) {
		usage(stdout)
		return exitOK
	}
	return report(cfg, ld, err, stdout, stderr, print)
}

// load loads the configuration for serving; on failure cfg is nil and
// code says how to exit.
func load(args, environ []string, stdout, stderr io.Writer) (*config.Config, *slog.Logger, *slog.LevelVar, int) {
	cfg, ld, err := config.Load(args, environ)
	if errors.Is(err, config.ErrHelp) {
		usage(stdout)
		return nil, nil, nil, exitOK
	}
	if code := report(cfg, ld, err, stdout, stderr, false); code != exitOK {
		return nil, nil, nil, code
	}
	logger, lv := newLogger(stderr, cfg.Log)
	return cfg, logger, lv, exitOK
}

// report logs the configuration's warnings and either prints it or lists
// every problem.
func report(cfg *config.Config, ld *config.Loaded, err error, stdout, stderr io.Writer, print bool) int {
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if err == nil {
		logger, _ = newLogger(stderr, cfg.Log)
	}
	for _, w := range ld.Warnings {
		logger.Warn(w.Msg, "subject", w.Subject)
	}
	if err != nil {
		n := len(config.Problems(err))
		fmt.Fprintf(stderr, "fibril: invalid configuration (%d problem%s):\n", n, plural(n))
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintln(stderr, "  "+line)
		}
		return exitUsage
	}
	if print {
		if err := config.WriteEffective(stdout, cfg, ld); err != nil {
			fmt.Fprintln(stderr, "fibril:", err)
			return exitError
		}
	}
	return exitOK
}

// generate writes generated text to stdout, or to the file named by -o
// (used by go:generate, which runs commands without a shell).
func generate(args []string, stdout, stderr io.Writer, write func(io.Writer) error) int {
	out := stdout
	switch {
	case len(args) == 0:
	case len(args) == 2 && args[0] == "-o":
		f, err := os.Create(args[1])
		if err != nil {
			fmt.Fprintln(stderr, "fibril:", err)
			return exitError
		}
		defer f.Close()
		out = f
	default:
		fmt.Fprintln(stderr, "fibril: usage: fibril config example|docs [-o FILE]")
		return exitUsage
	}
	if err := write(out); err != nil {
		fmt.Fprintln(stderr, "fibril:", err)
		return exitError
	}
	return exitOK
}

// newLogger builds the process logger from log.level and log.format. Its
// level is a variable the admin API may change while the broker runs
// (Broker.SetLogLevelVar).
func newLogger(w io.Writer, l config.Log) (*slog.Logger, *slog.LevelVar) {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Level)) // validated by Load
	lv := new(slog.LevelVar)
	lv.Set(level)
	opts := &slog.HandlerOptions{Level: lv}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), lv
	}
	return slog.New(slog.NewTextHandler(w, opts)), lv
}

// cutFlag takes the string flag --name (as "--name V" or "--name=V") out
// of args, for a subcommand that passes the rest to config.Load; the last
// one given wins.
func cutFlag(args []string, name string) (value string, rest []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--"+name && i+1 < len(args):
			value = args[i+1]
			i++
		case strings.HasPrefix(a, "--"+name+"="):
			value = strings.TrimPrefix(a, "--"+name+"=")
		default:
			rest = append(rest, a)
		}
	}
	return value, rest
}

// versionString is `fibril version`'s line: version, commit, date and Go
// version (core/buildinfo).
func versionString() string { return "fibril " + buildinfo.Get().String() }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  fibril [--config PATH] [--<key> VALUE ...]   start the broker (SIGINT/SIGTERM stop it gracefully)
  fibril config print [flags]                   print the effective configuration with origins
  fibril config check [flags]                   validate only; exit 0 when valid, 2 otherwise
  fibril config example [-o FILE]               write fibril.example.toml
  fibril config docs [-o FILE]                  write docs/configuration.md
  fibril dev [--nodes N] [--private K] [--dir DIR] [--client-port P] [--admin-port P] [--raft-port P]
             [--coordination raft|consul|NAME] [--consul-addr HOST:PORT] [--consul-prefix P]
             [--restart-after D] [-- broker flags...]
                                                a local N-broker cluster on loopback ports (Ctrl-C stops it);
                                                the last K brokers are private, reached only through the public
                                                ones, which forward (fibril dev -h lists the defaults); a broker
                                                that exits is reported and the others keep running; with
                                                --coordination consul (--backend is the same flag) the brokers
                                                coordinate through the Consul agent at --consul-addr
  fibril dev restart --dir DIR NODE...          start a broker of that running fibril dev again (its data kept)
  fibril health [--ready] [config flags]        ask this broker's admin listener for /healthz (liveness; with
                                                --ready, /readyz: readiness); exit 0 when it answers 200
  fibril auth hash-password                     print the argon2id hash of a password (prompted, or the first
                                                line of stdin) for auth.seed_users' password_hash
  fibril raft recover --members ID=HOST:PORT,... with the broker stopped, make the listed members the raft group's
                                                only voters (a quorum lost for good; coordination/raft/README.md)
  fibril restore --from BACKUP.tar [flags]      unpack a backup (fibrilctl backup) into a new server.data_dir
  fibril version                                version, commit, build date and Go version

Precedence: defaults < TOML file < FIBRIL_* environment < flags.
Reference: docs/configuration.md. Flags:
`)
	config.FlagUsage(w)
}
