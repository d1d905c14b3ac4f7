// Command nodeinit is the PID 1 of a simulated node in make e2e-k8s
// (integration/e2ek8s), the one stand-in of that test: the machine it
// runs on has no systemd (its PID 1 is not systemd), so each node gets
// this minimal init instead.
//
// Started by the test in new PID, mount, UTS and network namespaces, it
//
//   - makes the node's mount tree its own (rprivate, then rshared, as
//     `unshare --mount` and `mount --make-rshared /` do), mounts a /proc
//     of the node's PID namespace, binds the node's own directories over
//     the host paths the chart uses (/etc/containerd, /var/lib/kubelet,
//     /mnt/shared/..., ...) and mounts an empty tmpfs over the run
//     directories (/run/containerd, ...), as a boot finds them;
//   - sets the hostname, then waits for one line on its standard input
//     (the test has set up the node's network);
//   - starts the units enabled in /etc/systemd/system (symlinks in
//     multi-user.target.wants, and the .wants of every unit started), in
//     the order their Before= and After= give, waiting for READY=1 on
//     NOTIFY_SOCKET for Type=notify units;
//   - reaps every process of the node (it is PID 1) and restarts units
//     with Restart=always (or on-failure) when they exit;
//   - serves systemctl: the same binary, named systemctl (the test binds
//     a directory holding it over /usr/local/sbin), talks to the init
//     over a unix socket. Verbs: daemon-reload, enable, disable, start,
//     stop, restart, is-active.
//
// The unit file subset: [Unit] Description, Wants, Requires, Before,
// After; [Service] Type (simple, exec, notify, oneshot), ExecStartPre,
// ExecStart, Environment, EnvironmentFile, Restart, RestartSec, KillMode,
// KillSignal, TimeoutStartSec, TimeoutStopSec; [Install] WantedBy, RequiredBy. Other
// directives are ignored (and logged). A node "reboots" when the test
// kills this process: the kernel then kills every process of its PID
// namespace, and the namespaces go with them.
package main
