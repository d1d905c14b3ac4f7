package cli

import (
	"flag"
	"fmt"
)

// Alias defines old as a deprecated name of the flag name, which fs must
// already define: on the command line, as an environment variable
// (SHAREDCONTENT_<OLD>) and as a TOML key. Parse uses it only where the
// new name is not given in the same place, and prints a note to
// fs.Output() that names the new name. Usage lists it apart.
func Alias(fs *flag.FlagSet, old, name string) {
	if fs.Lookup(name) == nil {
		panic("cli.Alias: no flag " + name)
	}
	fs.Var(&alias{name: name}, old, "deprecated name of --"+name)
}

// alias is the value of a deprecated flag name: it keeps what it was set
// to until Parse hands it to the flag it names.
type alias struct {
	name  string // the new name
	value string
	set   bool
}

func (a *alias) String() string { return a.value }

func (a *alias) Set(v string) error {
	a.value, a.set = v, true
	return nil
}

// aliasOf returns f's alias value, if f is a deprecated name.
func aliasOf(f *flag.Flag) (*alias, bool) {
	a, ok := f.Value.(*alias)
	return a, ok
}

// aliases returns the deprecated names of the flag name.
func aliases(fs *flag.FlagSet, name string) []string {
	var old []string
	fs.VisitAll(func(f *flag.Flag) {
		if a, ok := aliasOf(f); ok && a.name == name {
			old = append(old, f.Name)
		}
	})
	return old
}

// deprecated prints the note for a deprecated name used in where.
func deprecated(fs *flag.FlagSet, where, old, name string) {
	fmt.Fprintf(fs.Output(), "%s: %s is deprecated, use %s\n", fs.Name(), fmt.Sprintf(where, old), fmt.Sprintf(where, name))
}

// resolveCommandLine hands the deprecated names set on the command line to
// their new names, unless those are set too, and marks them explicit.
func resolveCommandLine(fs *flag.FlagSet, explicit map[string]bool) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		a, ok := aliasOf(f)
		if !ok || err != nil {
			return
		}
		deprecated(fs, "--%s", f.Name, a.name)
		if explicit[a.name] {
			return // the new name wins
		}
		if e := fs.Set(a.name, a.value); e != nil {
			err = fmt.Errorf("--%s: %w", f.Name, e)
		}
		explicit[a.name] = true
	})
	return err
}
