// Package prompt reads a new password the way both commands ask for one
// (fibrilctl users add and passwd, fibril auth hash-password): from a
// terminal without echo, typed twice, or from the first line of a pipe.
package prompt

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// NewPassword prompts twice, with echo off, when stdin is a terminal,
// and otherwise reads the first line of stdin (a pipe or a file), so
// scripts can feed it. When ctx ends at the prompt (the first Ctrl-C; a
// second one kills the process), the terminal gets its echo back at once,
// so the kill does not leave it without, and the context's error is
// returned once the pending line is read.
func NewPassword(ctx context.Context, in io.Reader, prompts io.Writer) (string, error) {
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd := int(f.Fd())
		if st, err := term.GetState(fd); err == nil {
			stop := context.AfterFunc(ctx, func() { _ = term.Restore(fd, st) })
			defer stop()
		}
		read := func(prompt string) ([]byte, error) {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("password prompt interrupted: %w", err)
			}
			fmt.Fprint(prompts, prompt)
			p, err := term.ReadPassword(fd)
			fmt.Fprintln(prompts)
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("password prompt interrupted: %w", err)
			}
			if err != nil {
				return nil, fmt.Errorf("read password: %w", err)
			}
			return p, nil
		}
		p1, err := read("New password: ")
		if err != nil {
			return "", err
		}
		p2, err := read("Repeat password: ")
		if err != nil {
			return "", err
		}
		if !bytes.Equal(p1, p2) {
			return "", fmt.Errorf("the passwords do not match")
		}
		return string(p1), nil
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("read password from stdin: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}
