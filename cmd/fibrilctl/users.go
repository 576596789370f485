package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fibrilgo/fibril/cmd/internal/prompt"
)

// adminError is an error answered by the admin API.
type adminError struct {
	status  int
	code    string
	message string
}

func (e *adminError) Error() string {
	if e.code == "" {
		return fmt.Sprintf("admin API: HTTP %d: %s", e.status, e.message)
	}
	return fmt.Sprintf("admin API: HTTP %d %s: %s", e.status, e.code, e.message)
}

// adminClient talks to the broker's admin HTTP listener.
type adminClient struct {
	base       string
	user, pass string
	hc         *http.Client
}

func (g *globals) adminClient(e *env) (*adminClient, error) {
	if g.admin == "" {
		return nil, usagef("--admin is empty")
	}
	scheme := "http"
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the admin listener is reached directly
	if g.adminTLS {
		scheme = "https"
		cfg, err := g.tlsConfig()
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
	}
	return &adminClient{
		base: scheme + "://" + g.admin, user: g.adminUser, pass: g.adminPass,
		hc: &http.Client{Transport: tr, Timeout: g.timeout},
	}, nil
}

// do sends a request and decodes a JSON answer into out (when not nil);
// non-2xx answers become *adminError.
func (a *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if a.user != "" {
		req.SetBasicAuth(a.user, a.pass)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin API %s: %w", a.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API: read answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return decodeAdminError(resp.StatusCode, data)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("admin API: malformed answer: %w", err)
		}
	}
	return nil
}

// decodeAdminError turns a non-2xx answer into an *adminError: the API's
// {code, message}, else the body's text.
func decodeAdminError(status int, data []byte) *adminError {
	ae := &adminError{status: status}
	var eb struct{ Code, Message string }
	if json.Unmarshal(data, &eb) == nil && (eb.Code != "" || eb.Message != "") {
		ae.code, ae.message = eb.Code, eb.Message
	} else {
		ae.message = strings.TrimSpace(string(data))
		if ae.message == "" {
			ae.message = http.StatusText(status)
		}
	}
	return ae
}

type userEntry struct {
	Username    string           `json:"username"`
	Created     time.Time        `json:"created"`
	Permissions []userPermission `json:"permissions"`
}

// userPermission is one entry of a user's permission list.
type userPermission struct {
	Topics  []string `json:"topics"`
	Actions []string `json:"actions"`
}

func runUsers(ctx context.Context, g *globals, e *env, args []string) error {
	// Users go through the admin API, which has its own credentials
	// (--admin-user/--admin-password): here --password is the new user's.
	fs := newFlagSet("users", "add NAME [--password P] | passwd NAME [--password P] | list [--json] | remove NAME | allow NAME --topic PATTERN --actions A,B | permissions NAME [--clear | --none]", g, e, "password")
	password := fs.String("password", "", "users add, passwd: the new password (default: prompt on a terminal, else the first line of stdin)")
	asJSON := fs.Bool("json", false, "users list, permissions: print JSON")
	var topics stringList
	fs.Var(&topics, "topic", "users allow: a topic pattern ('*' for any run of characters; repeatable)")
	actions := fs.String("actions", "", "users allow: comma-separated actions: declare, publish, consume")
	clearList := fs.Bool("clear", false, "users permissions: remove the list; the user may do everything again")
	none := fs.Bool("none", false, "users permissions: an empty list; the user may do nothing until allowed")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("users needs a subcommand: add NAME, passwd NAME, list, remove NAME, allow NAME or permissions NAME")
	}
	a, err := g.adminClient(e)
	if err != nil {
		return err
	}
	sub, pos := pos[0], pos[1:]
	switch sub {
	case "list", "ls":
		if len(pos) > 0 {
			return usagef("users list takes no argument")
		}
		var out struct {
			Users []userEntry `json:"users"`
		}
		if err := a.do(ctx, http.MethodGet, "/admin/api/users", nil, &out); err != nil {
			return err
		}
		if out.Users == nil {
			out.Users = []userEntry{}
		}
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "USERNAME\tCREATED")
		for _, u := range out.Users {
			fmt.Fprintf(tw, "%s\t%s\n", u.Username, u.Created.UTC().Format(time.RFC3339))
		}
		return tw.Flush()
	case "add", "passwd":
		if len(pos) != 1 {
			return usagef("users %s takes exactly one NAME", sub)
		}
		pw := *password
		if pw == "" {
			if pw, err = prompt.NewPassword(ctx, e.stdin, e.stderr); err != nil {
				return err
			}
		}
		if pw == "" {
			return usagef("empty password")
		}
		if sub == "passwd" {
			body := map[string]string{"password": pw}
			if err := a.do(ctx, http.MethodPut, "/admin/api/users/"+url.PathEscape(pos[0])+"/password", body, nil); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "password of user %s changed\n", pos[0])
			return nil
		}
		body := map[string]string{"username": pos[0], "password": pw}
		if err := a.do(ctx, http.MethodPost, "/admin/api/users", body, nil); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "user %s added\n", pos[0])
		return nil
	case "remove", "rm", "delete":
		if len(pos) != 1 {
			return usagef("users remove takes exactly one NAME")
		}
		if err := a.do(ctx, http.MethodDelete, "/admin/api/users/"+url.PathEscape(pos[0]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "user %s removed\n", pos[0])
		return nil
	case "allow", "permissions":
		if len(pos) != 1 {
			return usagef("users %s takes exactly one NAME", sub)
		}
		return userPermissions(ctx, a, e, sub, pos[0], topics, *actions, *clearList, *none, *asJSON)
	}
	return usagef("unknown users subcommand %q (add, passwd, list, remove, allow, permissions)", sub)
}

// userPermissions is `users allow` (add an entry to the user's list) and
// `users permissions` (show it, or --clear / --none it), through GET
// /admin/api/users and PUT /admin/api/users/NAME/permissions.
func userPermissions(ctx context.Context, a *adminClient, e *env, sub, name string, topics []string, actions string, clearList, none, asJSON bool) error {
	var list struct {
		Users []userEntry `json:"users"`
	}
	if err := a.do(ctx, http.MethodGet, "/admin/api/users", nil, &list); err != nil {
		return err
	}
	var cur *userEntry
	for i := range list.Users {
		if list.Users[i].Username == name {
			cur = &list.Users[i]
		}
	}
	if cur == nil {
		return fmt.Errorf("user %s does not exist", name)
	}
	var next []userPermission
	switch {
	case sub == "allow":
		if len(topics) == 0 || actions == "" || clearList || none {
			return usagef("users allow NAME needs --topic PATTERN (repeatable) and --actions A,B")
		}
		next = append(append([]userPermission{}, cur.Permissions...), userPermission{Topics: topics, Actions: strings.Split(actions, ",")})
	case clearList && none:
		return usagef("--clear and --none exclude each other")
	case clearList:
		next = nil
	case none:
		next = []userPermission{}
	default:
		if len(topics) > 0 || actions != "" {
			return usagef("users permissions shows or resets a list; add to it with users allow")
		}
		return printPermissions(e, cur, asJSON)
	}
	var out userEntry
	body := map[string]any{"permissions": next}
	if err := a.do(ctx, http.MethodPut, "/admin/api/users/"+url.PathEscape(name)+"/permissions", body, &out); err != nil {
		return err
	}
	out.Username = name
	return printPermissions(e, &out, asJSON)
}

func printPermissions(e *env, u *userEntry, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"username": u.Username, "permissions": u.Permissions})
	}
	switch {
	case u.Permissions == nil:
		fmt.Fprintf(e.stdout, "user %s: unrestricted (no permission list)\n", u.Username)
		return nil
	case len(u.Permissions) == 0:
		fmt.Fprintf(e.stdout, "user %s: an empty list: nothing is allowed\n", u.Username)
		return nil
	}
	fmt.Fprintf(e.stdout, "user %s may:\n", u.Username)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ACTIONS\tTOPICS")
	for _, p := range u.Permissions {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.Join(p.Actions, ","), strings.Join(p.Topics, " "))
	}
	return tw.Flush()
}
