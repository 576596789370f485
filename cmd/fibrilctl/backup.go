package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
)

// runBackup is `fibrilctl backup --out FILE`: the broker at --admin
// writes a backup of what it holds (POST /admin/api/backup), taken while
// it serves, and this command saves the archive; `fibril restore --from
// FILE` unpacks it into a new data directory.
func runBackup(ctx context.Context, g *globals, e *env, args []string) error {
	fs := newFlagSet("backup", "--out FILE [--node N]", g, e)
	out := fs.String("out", "", "the archive to write (a tar file; must not exist)")
	node := fs.String("node", "", "back up this node of the cluster (its admin address comes from the topology at --admin)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("backup needs --out FILE")
	}
	a, target, err := nodeAdminClient(ctx, g, e, *node)
	if err != nil {
		return err
	}
	a.hc.Timeout = 0 // a large broker takes long; ctx still bounds it
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	n, err := a.stream(ctx, http.MethodPost, "/admin/api/backup", f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(*out)
		return err
	}
	fmt.Fprintf(e.stdout, "backup of %s written to %s (%d bytes); restore it with: fibril restore --from %s\n", target, *out, n, *out)
	return nil
}

// stream sends a request without a body and copies a 2xx answer's body to
// w; other answers become *adminError.
func (a *adminClient) stream(ctx context.Context, method, path string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, nil)
	if err != nil {
		return 0, err
	}
	if a.user != "" {
		req.SetBasicAuth(a.user, a.pass)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("admin API %s: %w", a.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return 0, decodeAdminError(resp.StatusCode, b)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("admin API: the backup broke off after %d bytes: %w", n, err)
	}
	return n, nil
}
