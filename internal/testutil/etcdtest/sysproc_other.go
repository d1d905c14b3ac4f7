//go:build !linux

package etcdtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
