package prompt

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// Without a terminal, `users add` reads the new password from the first
// line of stdin, whether stdin is a pipe (an *os.File that is no terminal)
// or any other reader; nothing is prompted.
func TestReadNewPasswordFromAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteString("pipe-secret\r\nsecond line\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var errOut bytes.Buffer
	pw, err := NewPassword(context.Background(), r, &errOut)
	if err != nil || pw != "pipe-secret" {
		t.Fatalf("from a pipe: %q, %v", pw, err)
	}
	if errOut.Len() != 0 {
		t.Errorf("prompted without a terminal: %q", errOut.String())
	}

	// The last line may lack its newline.
	pw, err = NewPassword(context.Background(), strings.NewReader("no-newline"), &errOut)
	if err != nil || pw != "no-newline" {
		t.Fatalf("from a reader: %q, %v", pw, err)
	}
}
