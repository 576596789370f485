package main

import (
	"context"
	"fmt"
	"io"

	"github.com/fibrilgo/fibril/cmd/internal/prompt"
	"github.com/fibrilgo/fibril/core/auth"
)

// runAuth is `fibril auth hash-password`: the argon2id PHC string of a
// password, for auth.seed_users' password_hash (a config file then holds
// no password). The password is typed twice on a terminal without echo,
// or read from the first line of stdin, never from the command line
// (which other local users can see).
func runAuth(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] != "hash-password" {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(stdout, "usage: fibril auth hash-password < password\n\nPrints the argon2id hash (a PHC string) of the password typed on the terminal, or of the\nfirst line of stdin, for auth.seed_users' password_hash.")
			return exitOK
		}
		fmt.Fprintln(stderr, "fibril auth: usage: fibril auth hash-password (the password is prompted for, or read from stdin)")
		return exitUsage
	}
	pw, err := prompt.NewPassword(ctx, stdin, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "fibril auth hash-password:", err)
		return exitError
	}
	if pw == "" {
		fmt.Fprintln(stderr, "fibril auth hash-password: the password is empty")
		return exitUsage
	}
	if len(pw) > auth.MaxPasswordBytes {
		fmt.Fprintf(stderr, "fibril auth hash-password: the password is %d bytes long; the limit is %d\n", len(pw), auth.MaxPasswordBytes)
		return exitUsage
	}
	h, err := auth.HashPassword(pw)
	if err != nil {
		fmt.Fprintln(stderr, "fibril auth hash-password:", err)
		return exitError
	}
	fmt.Fprintln(stdout, h)
	return exitOK
}
