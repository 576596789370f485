package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core/config"
)

// healthTimeout bounds one probe: an orchestrator's check has its own
// timeout, and a probe that hangs past it helps nobody.
const healthTimeout = 3 * time.Second

// runHealth is `fibril health [--ready] [config flags]`: the container
// health check, with no shell or curl in the image. It reads the same
// configuration as the broker (file, FIBRIL_* environment, flags) to find
// the admin listener, asks the broker there for /healthz (with --ready,
// /readyz) and exits 0 when the answer is 200, 1 otherwise.
//
// Liveness (Docker's HEALTHCHECK, a Kubernetes livenessProbe) must use the
// default: /readyz turns false while the broker recovers, drains or is cut
// off from coordination, and restarting it then makes things worse.
func runHealth(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	ready := false
	var rest []string
	for _, a := range args {
		switch a {
		case "--ready", "-ready":
			ready = true
		case "-h", "--help", "-help":
			fmt.Fprintln(stdout, "usage: fibril health [--ready] [config flags]\n\nAsks the broker's admin listener for /healthz (liveness), or /readyz with --ready (readiness),\nand exits 0 when it answers 200, 1 otherwise. It reads the broker's configuration to find it.")
			return exitOK
		default:
			rest = append(rest, a)
		}
	}
	cfg, _, err := config.Load(rest, environ)
	if err != nil {
		fmt.Fprintln(stderr, "fibril health:", err)
		return exitUsage
	}
	path := "/healthz"
	if ready {
		path = "/readyz"
	}
	url, err := probeURL(cfg.Admin.Listener.Bind, cfg.TLS.AdminEnabled, path)
	if err != nil {
		fmt.Fprintln(stderr, "fibril health: admin.listener.bind:", err)
		return exitUsage
	}
	code, body, err := probe(ctx, url)
	if err != nil {
		fmt.Fprintf(stderr, "fibril health: %s: %v\n", url, err)
		return exitError
	}
	fmt.Fprintf(stdout, "%s: %d %s\n", url, code, body)
	if code != http.StatusOK {
		return exitError
	}
	return exitOK
}

// probeURL turns the admin listener's bind address into the address a
// probe in the same host or container dials: a wildcard host (all
// interfaces) is reached on loopback.
func probeURL(bind string, https bool, path string) (string, error) {
	host, port, err := net.SplitHostPort(bind)
	if err != nil {
		return "", err
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::", "[::]":
		host = "::1"
	}
	scheme := "http"
	if https {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + path, nil
}

// probe GETs url. The broker's certificate is not verified: the probe
// sends nothing secret (the health endpoints need no login) and reads
// only a status code from its own host, where a certificate's name and
// issuer (often the broker's automatic CA) tell nothing.
func probe(ctx context.Context, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Proxy: nil}}
	resp, err := c.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return 0, "", fmt.Errorf("no answer within %s", healthTimeout)
		}
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}
