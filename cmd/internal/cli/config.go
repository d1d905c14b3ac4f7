package cli

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/containerd/log"
	"github.com/pelletier/go-toml/v2"
)

// EnvPrefix prefixes every environment variable.
const EnvPrefix = "SHAREDCONTENT_"

// ConfigFlag is the flag (and TOML-less environment variable
// SHAREDCONTENT_CONFIG) naming the TOML file.
const ConfigFlag = "config"

// EnvName returns the environment variable of a flag: "lease-ttl" →
// "SHAREDCONTENT_LEASE_TTL".
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then layers the TOML file named by --config
// and the environment under what the command line set explicitly. fs must
// define a string flag named ConfigFlag. Unknown TOML keys and values that
// do not parse are errors naming their source.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if versionAsked(fs) {
		PrintVersion(versionOut, fs.Name())
		return flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if err := resolveCommandLine(fs, explicit); err != nil {
		return err
	}

	path := fs.Lookup(ConfigFlag).Value.String()
	if !explicit[ConfigFlag] {
		if v, ok := os.LookupEnv(EnvName(ConfigFlag)); ok {
			path = v
			if err := fs.Set(ConfigFlag, v); err != nil {
				return err
			}
		}
	}
	if path != "" {
		if err := applyTOML(fs, path, explicit); err != nil {
			return err
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if _, isAlias := aliasOf(f); isAlias || err != nil || explicit[f.Name] || f.Name == ConfigFlag || f.Name == VersionFlag {
			return
		}
		if name, v, ok := lookupEnv(fs, f.Name, true); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment %s=%q: %w", name, v, e)
			}
		}
	})
	return err
}

// lookupEnv returns the environment variable of the flag name, or else of
// one of its deprecated names (with a note, if note).
func lookupEnv(fs *flag.FlagSet, name string, note bool) (env, value string, ok bool) {
	if v, ok := os.LookupEnv(EnvName(name)); ok {
		return EnvName(name), v, true
	}
	for _, old := range aliases(fs, name) {
		if v, ok := os.LookupEnv(EnvName(old)); ok {
			if note {
				deprecated(fs, "environment %s", EnvName(old), EnvName(name))
			}
			return EnvName(old), v, true
		}
	}
	return "", "", false
}

func applyTOML(fs *flag.FlagSet, path string, explicit map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var values map[string]any
	if err := toml.Unmarshal(b, &values); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		name := strings.ReplaceAll(k, "_", "-")
		f := fs.Lookup(name)
		if f == nil || name == ConfigFlag || name == VersionFlag {
			return fmt.Errorf("config file %s: unknown key %q", path, k)
		}
		if a, ok := aliasOf(f); ok {
			newKey := strings.ReplaceAll(a.name, "-", "_")
			deprecated(fs, "config file key %s", k, newKey)
			if _, both := values[newKey]; both {
				continue // the new key wins
			}
			name = a.name
		}
		if explicit[name] {
			continue
		}
		if _, _, ok := lookupEnv(fs, name, false); ok {
			continue // the environment overrides the file
		}
		v := values[k]
		switch v.(type) {
		case string, bool, int64, float64:
		default:
			return fmt.Errorf("config file %s: key %q: want a string, number or boolean, got %T", path, k, v)
		}
		if err := fs.Set(name, fmt.Sprint(v)); err != nil {
			return fmt.Errorf("config file %s: key %q: %w", path, k, err)
		}
	}
	return nil
}

// Usage returns a flag.Usage that lists every flag with its environment
// variable.
func Usage(fs *flag.FlagSet, synopsis string) func() {
	return func() {
		out := fs.Output()
		fmt.Fprintf(out, "%s\n\nFlags (each also an environment variable; TOML keys are the flag names):\n", synopsis)
		var old []string
		fs.VisitAll(func(f *flag.Flag) {
			if a, ok := aliasOf(f); ok {
				old = append(old, fmt.Sprintf("--%s (--%s)", f.Name, a.name))
				return
			}
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(out, "  --%s  [%s]%s\n      %s\n", f.Name, EnvName(f.Name), def, f.Usage)
		})
		if len(old) > 0 {
			fmt.Fprintf(out, "\nDeprecated names, still accepted (also as environment variables and TOML keys): %s\n", strings.Join(old, ", "))
		}
	}
}

// SetLogLevel configures containerd/log's logger, with quietFormatter.
func SetLogLevel(level string) error {
	if err := log.SetLevel(level); err != nil {
		return fmt.Errorf("log level %q: %w", level, err)
	}
	if err := log.SetFormat(log.TextFormat); err != nil {
		return err
	}
	log.L.Logger.SetFormatter(quietFormatter{next: log.L.Logger.Formatter})
	return nil
}
