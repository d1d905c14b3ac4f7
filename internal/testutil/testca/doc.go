// Package testca issues short-lived certificates for tests that serve and
// dial TLS and mutual TLS on loopback.
package testca
