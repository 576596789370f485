package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// restartFile is the request `fibril dev restart` leaves in a broker's
// directory for the running `fibril dev` to act on.
const restartFile = "restart"

// superviseDev runs once the cluster is ready, until ctx ends. A broker
// that exits (kill -9 it to see what clients see when a broker dies) is
// reported with how it ended, and the others keep running. It is started
// again, with its data, on request: its name typed on standard input,
// `fibril dev restart --dir DIR NODE` from another terminal (a request
// file in its directory, looked for every 250 ms), or by itself after
// restartAfter when that is above zero.
func superviseDev(ctx context.Context, cluster []*devNode, root string, start func(*devNode) error,
	restartAfter time.Duration, stdin io.Reader, stdout, stderr io.Writer) {
	exits := make(chan *devNode, len(cluster))
	watch := func(n *devNode) {
		go func(done <-chan struct{}) {
			<-done
			exits <- n
		}(n.exited)
	}
	for _, n := range cluster {
		watch(n)
	}
	requests := make(chan string, 16)
	if stdin != nil {
		go func() {
			sc := bufio.NewScanner(stdin)
			for sc.Scan() {
				if name := strings.TrimSpace(sc.Text()); name != "" {
					select {
					case requests <- name:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	byID := make(map[string]*devNode, len(cluster))
	for _, n := range cluster {
		byID[n.id] = n
	}
	down := make(map[string]bool)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	restart := func(name string) {
		n := byID[name]
		switch {
		case n == nil:
			fmt.Fprintf(stderr, "fibril dev: no broker %q (the brokers are node-1 … node-%d)\n", name, len(cluster))
		case !down[name]:
			fmt.Fprintf(stderr, "fibril dev: %s is running\n", name)
		default:
			if err := start(n); err != nil {
				fmt.Fprintf(stderr, "fibril dev: %s could not start again: %v\n", name, err)
				return
			}
			delete(down, name)
			watch(n)
			fmt.Fprintf(stdout, "%s started again (its data kept)\n", name)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-exits:
			down[n.id] = true
			how := "it ended"
			if n.cmd != nil && n.cmd.ProcessState != nil {
				how = n.cmd.ProcessState.String()
			}
			fmt.Fprintf(stderr, "fibril dev: %s exited (%s); the others keep running. Restart it: type %s and Enter here, or run `fibril dev restart --dir %s %s`\n",
				n.id, how, n.id, root, n.id)
			if restartAfter > 0 {
				name := n.id
				time.AfterFunc(restartAfter, func() {
					select {
					case requests <- name:
					case <-ctx.Done():
					}
				})
			}
		case name := <-requests:
			restart(name)
		case <-tick.C:
			for _, n := range cluster {
				req := filepath.Join(n.dir, restartFile)
				if _, err := os.Stat(req); err == nil {
					_ = os.Remove(req)
					restart(n.id)
				}
			}
		}
	}
}

// runDevRestart is `fibril dev restart --dir DIR NODE...`: it asks the
// `fibril dev` running on DIR to start the named brokers again.
func runDevRestart(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fibril dev restart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the directory of the running `fibril dev` (its \"cluster ready\" line names it)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: fibril dev restart --dir DIR NODE...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *dir == "" || fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	for _, name := range fs.Args() {
		nd := filepath.Join(*dir, name)
		if st, err := os.Stat(nd); err != nil || !st.IsDir() {
			fmt.Fprintf(stderr, "fibril dev restart: no broker %s in %s\n", name, *dir)
			return exitUsage
		}
		if err := os.WriteFile(filepath.Join(nd, restartFile), nil, 0o600); err != nil {
			fmt.Fprintln(stderr, "fibril dev restart:", err)
			return exitError
		}
		fmt.Fprintf(stdout, "asked fibril dev to start %s again\n", name)
	}
	return exitOK
}
