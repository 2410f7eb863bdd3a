package app

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/internal/fileinput"
)

// The config file's apiVersion and kind. Files of the first release carry
// "version: rankgate.io/v1" and no kind; they keep loading.
const (
	ConfigAPIVersion = "rankgate.io/v1"
	ConfigKind       = "Config"
)

// Config is what LoadConfig learnt beyond the flags: the file it read.
// Precedence, lowest first: built-in defaults (the flags' own), config
// file, RANKGATE_* environment, flags. Keys are the long flag names
// ("nvml-timeout"); in the environment they are upper case with "_"
// ("RANKGATE_NVML_TIMEOUT"). The merged values end up in the flags, and
// through them in each command's options struct.
type Config struct {
	// File is the config file that was read, if any.
	File string
}

// maxConfigSize bounds the config file: it holds one value per flag, a
// few hundred bytes.
const maxConfigSize = 1 << 20

// notConfigKeys are flags that the file and the environment do not set.
var notConfigKeys = map[string]bool{"config": true, "help": true, "version": true}

// LoadConfig merges the config file and the RANKGATE_* environment under
// cmd's flags: every flag not given on the command line takes the merged
// value (pflag Value.Set, SliceValue.Replace), so that commands read only
// their typed options. Unknown keys in the file, a wrong apiVersion or
// kind, and values a flag cannot take are errors.
func LoadConfig(cmd *cobra.Command, file string) (*Config, error) {
	v := viper.New()
	v.SetEnvPrefix("RANKGATE")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if file == "" {
		file = os.Getenv("RANKGATE_CONFIG")
	}
	if file != "" {
		data, err := fileinput.ReadFile(cmd.Context(), file, nil, maxConfigSize)
		if err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		values, err := decodeConfigFile(data, knownKeys(cmd.Root()))
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", file, err)
		}
		if err := v.MergeConfigMap(values); err != nil {
			return nil, fmt.Errorf("config file %s: %w", file, err)
		}
	}
	var errs []string
	seen := map[string]bool{}
	visit := func(f *pflag.Flag) {
		if seen[f.Name] {
			return
		}
		seen[f.Name] = true
		if !f.Changed && !notConfigKeys[f.Name] && v.IsSet(f.Name) {
			if err := setFlag(f, v.Get(f.Name)); err != nil {
				errs = append(errs, err.Error())
				return
			}
		}
		// Durations are validated here so that commands can trust them.
		if f.Value.Type() == "duration" {
			if d, err := time.ParseDuration(f.Value.String()); err == nil && d < 0 {
				errs = append(errs, fmt.Sprintf("%s %q must not be negative", f.Name, f.Value.String()))
			}
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return &Config{File: file}, nil
}

// setFlag gives f a value from the file or the environment. A list flag
// takes a YAML list as is (a path may hold a comma) and splits a single
// string on commas.
func setFlag(f *pflag.Flag, val any) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		var list []string
		switch t := val.(type) {
		case string:
			list = splitList(t)
		case []any:
			for _, e := range t {
				list = append(list, fmt.Sprint(e))
			}
		default:
			list = []string{fmt.Sprint(t)}
		}
		return sv.Replace(list)
	}
	s := fmt.Sprint(val)
	if err := f.Value.Set(s); err != nil {
		switch f.Value.Type() {
		case "duration":
			return fmt.Errorf("%s %q is not a duration like 30s", f.Name, s)
		case "format":
			return fmt.Errorf("%s: %w", f.Name, err) // names the formats
		}
		return fmt.Errorf("%s %q: want a %s", f.Name, s, f.Value.Type())
	}
	return nil
}

// decodeConfigFile reads a versioned YAML config: apiVersion and kind (or,
// in the first release's form, a "version" key and no kind) and flat keys
// named like the flags. Unknown keys are refused with the list of known
// ones.
func decodeConfigFile(data []byte, known map[string]bool) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if err := checkConfigHeader(m); err != nil {
		return nil, err
	}
	delete(m, "apiVersion")
	delete(m, "version")
	delete(m, "kind")
	var unknown []string
	for k := range m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("unknown keys %s (keys are the long flag names, e.g. nvml-timeout)", strings.Join(unknown, ", "))
	}
	return m, nil
}

func checkConfigHeader(m map[string]any) error {
	apiVersion, hasAPI := m["apiVersion"]
	version, hasOld := m["version"]
	kind, hasKind := m["kind"]
	switch {
	case hasAPI && hasOld:
		return fmt.Errorf("both apiVersion and version: keep apiVersion: %s", ConfigAPIVersion)
	case hasAPI:
		if apiVersion != ConfigAPIVersion {
			return fmt.Errorf("apiVersion %q is not supported (want %q)", fmt.Sprint(apiVersion), ConfigAPIVersion)
		}
		if !hasKind {
			return fmt.Errorf("kind is missing (want kind: %s)", ConfigKind)
		}
	case hasOld:
		if version != ConfigAPIVersion {
			return fmt.Errorf("version %q is not supported (want apiVersion: %s)", fmt.Sprint(version), ConfigAPIVersion)
		}
	default:
		return fmt.Errorf("apiVersion is missing (want apiVersion: %s and kind: %s)", ConfigAPIVersion, ConfigKind)
	}
	if hasKind && kind != ConfigKind {
		return fmt.Errorf("kind %q is not a rankgate config file (want kind: %s; a snapshot, MIG catalog or driver table goes to its own flag)", fmt.Sprint(kind), ConfigKind)
	}
	return nil
}

func knownKeys(root *cobra.Command) map[string]bool {
	keys := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { keys[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { keys[f.Name] = true })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	for k := range notConfigKeys {
		delete(keys, k)
	}
	return keys
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// newLogger builds the one real logger; libraries get it or a no-op.
func newLogger(w io.Writer, level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log-level %q: want debug, info, warn or error", level)
	}
	if format != "console" && format != "json" {
		return nil, fmt.Errorf("log-format %q: want console or json", format)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	// Durations read like 175ms, in the console and in JSON, for zap and
	// for the controller's logr (zapr) alike.
	enc.EncodeDuration = zapcore.StringDurationEncoder
	var encoder zapcore.Encoder
	if format == "json" {
		encoder = zapcore.NewJSONEncoder(enc)
	} else {
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		encoder = zapcore.NewConsoleEncoder(enc)
	}
	return zap.New(zapcore.NewCore(encoder, zapcore.AddSync(w), lvl)), nil
}

// configExample is printed by docs and tests: a valid file.
var configExample = bytes.TrimSpace([]byte(`
apiVersion: rankgate.io/v1
kind: Config
log-level: info
nvml-timeout: 10s
`))
