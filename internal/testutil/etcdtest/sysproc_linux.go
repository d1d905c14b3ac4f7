package etcdtest

import "syscall"

// sysProcAttr kills an etcd member when the test process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
