// Package tlsconf prepares the broker's TLS material: the operator's PEM
// files or an automatically generated CA and server certificate under
// <data_dir>/tls (S-150), the server tls.Config for the client listener
// with optional client certificates (S-154) and for the admin listener
// (S-156), hot reload that keeps the old pair on failure (S-153), the
// certificate identity rule, and the first-bytes sniff that tells TLS from
// plaintext on an accepted socket (docs/protocol.md#transport, S-151).
//
// It depends on the standard library and the config types only; the
// session layer calls Sniff and writes the 426 answer itself.
package tlsconf
