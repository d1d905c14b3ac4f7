package failpoint

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// EnvVar arms failpoints in a binary built with the tag `failpoints`.
const EnvVar = "SHAREDCONTENT_FAILPOINTS"

// ExitCode is the status a process stopped by an "exit" failpoint exits
// with, distinct from Go's 2 (panic) and the daemons' 1 (error).
const ExitCode = 86

type actionKind int

const (
	actOff actionKind = iota
	actExit
	actPanic
	actSleep
)

type action struct {
	kind  actionKind
	sleep time.Duration
}

// parse reads "name=action;name=action". Names must be known (names.go):
// a misspelt point would never fire and the test would prove nothing.
func parse(s string) (map[string]action, error) {
	out := map[string]action{}
	for _, term := range strings.Split(s, ";") {
		term = strings.TrimSpace(term)
		if term == "" {
			continue
		}
		name, act, ok := strings.Cut(term, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want name=action", term)
		}
		if !known(name) {
			return nil, fmt.Errorf("%q: no failpoint of that name (see internal/failpoint/names.go)", name)
		}
		a, err := parseAction(act)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", term, err)
		}
		if a.kind != actOff {
			out[name] = a
		}
	}
	return out, nil
}

func parseAction(s string) (action, error) {
	switch s {
	case "off":
		return action{kind: actOff}, nil
	case "exit":
		return action{kind: actExit}, nil
	case "panic":
		return action{kind: actPanic}, nil
	}
	if ms, ok := strings.CutPrefix(s, "sleep("); ok && strings.HasSuffix(ms, ")") {
		n, err := strconv.Atoi(strings.TrimSuffix(ms, ")"))
		if err != nil || n < 0 {
			return action{}, fmt.Errorf("sleep(ms): bad duration %q", ms)
		}
		return action{kind: actSleep, sleep: time.Duration(n) * time.Millisecond}, nil
	}
	return action{}, fmt.Errorf("unknown action %q (exit, panic, sleep(ms), off)", s)
}

func known(name string) bool {
	for _, n := range Names {
		if n == name {
			return true
		}
	}
	return false
}
