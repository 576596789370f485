// Command fibrilctl is the command-line client of Fibril Go: declare
// queues and streams, publish, consume, inspect the topology, manage users
// through the admin API, and benchmark a broker.
//
//	fibrilctl [global flags] COMMAND [flags] [args]
//
// Run `fibrilctl help` for the command list, `fibrilctl COMMAND --help` for
// a command's flags. Global flags may also follow the command. Exit codes:
// 0 success, 1 failure, 2 usage error.
package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// The first signal asks the command to wind down (consume and
		// bench print their summaries); a second one kills the process.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// env is what a command may touch of the outside world (tests substitute
// it).
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// getenv reads a variable: the environment, then the env file
	// (withEnvFile); HOME and XDG_CONFIG_HOME locate the default env file.
	getenv func(string) string
	// envSource says where a variable's value came from (nil: the
	// environment).
	envSource func(string) string
	// flagSink, when set, receives each command's flag set instead of the
	// command running (completion scripts are generated from them).
	flagSink func(*flag.FlagSet)
}

// source says where variable k came from, for error messages.
func (e *env) source(k string) string {
	if e.envSource == nil {
		return "the environment"
	}
	return e.envSource(k)
}
