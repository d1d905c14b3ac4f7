//go:build !linux

package refcount

import bolt "go.etcd.io/bbolt"

// dropResident does nothing off Linux (bolt_resident_linux.go).
func dropResident(*bolt.DB, *bolt.Tx) {}
