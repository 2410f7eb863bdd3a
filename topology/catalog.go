package topology

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/internal/fileformat"
	"github.com/rankgate/rankgate/internal/fileinput"
)

// Catalog is the offline table of MIG profiles per GPU model. It is data
// (configs/mig-profiles.yaml) and is used only where the machine cannot be
// asked: pasted nvidia-smi outputs and cluster-level reasoning.
type Catalog struct {
	// APIVersion and Kind are the file header: CatalogAPIVersion and
	// CatalogKind.
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Models     []GPUModel `json:"models"`
}

// The MIG profile catalog format. Catalogs written before the header had a
// kind carry `version: rankgate.io/v1` and still load.
const (
	CatalogAPIVersion = "rankgate.io/v1"
	CatalogKind       = "MIGProfileCatalog"
)

// CatalogFormat is the catalog's header as this build checks it.
var CatalogFormat = fileformat.Format{
	APIVersion: CatalogAPIVersion, Kind: CatalogKind,
	LegacyVersion: "rankgate.io/v1",
}

// catalogFile is a catalog with either header.
type catalogFile struct {
	Catalog
	Version string `json:"version"`
}

// GPUModel is one GPU model's MIG geometry.
type GPUModel struct {
	Name string `json:"name"`
	// Source names where the model's numbers come from (a table of the
	// NVIDIA MIG user guide, a quoted `nvidia-smi mig -lgip`, mig-parted's
	// configuration); required.
	Source       string    `json:"source"`
	Match        []string  `json:"match"`
	MemoryMiB    uint64    `json:"memoryMiB"`
	SMs          int       `json:"sms"`
	Slices       int       `json:"slices"`
	MemorySlices int       `json:"memorySlices"`
	Profiles     []Profile `json:"profiles"`
}

// Profile is one GPU-instance profile of a model.
type Profile struct {
	Name         string `json:"name"`
	Slices       int    `json:"slices"`
	SMs          int    `json:"sms"`
	MemoryMiB    uint64 `json:"memoryMiB"`
	MaxInstances int    `json:"maxInstances"`
	Starts       []int  `json:"starts"`
	Size         int    `json:"size"`
}

// DefaultCatalog parses the embedded catalog. The embedded file is tested, so
// a failure here is a build defect.
func DefaultCatalog() *Catalog {
	c, err := ParseCatalog(configs.MIGProfiles)
	if err != nil {
		panic(fmt.Sprintf("embedded MIG catalog is invalid: %v", err))
	}
	return c
}

// MaxCatalogSize bounds a catalog file: the embedded one, every
// MIG-capable model NVIDIA documents, is 6 KiB.
const MaxCatalogSize = 1 << 20

// ReadCatalogFile reads and parses a catalog file: a regular file of at
// most MaxCatalogSize bytes.
func ReadCatalogFile(ctx context.Context, path string) (*Catalog, error) {
	data, err := fileinput.ReadFile(ctx, path, nil, MaxCatalogSize)
	if err != nil {
		return nil, fmt.Errorf("MIG profile catalog: %w", err)
	}
	c, err := ParseCatalog(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseCatalog decodes and validates a catalog file (YAML or JSON)
// strictly: unknown keys, a missing header and another apiVersion or kind
// are errors.
func ParseCatalog(data []byte) (*Catalog, error) {
	var f catalogFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		// A file of another kind fails on its first key unknown to a
		// catalog; its header says more.
		if h, ok := fileformat.PeekYAML(data); ok {
			if herr := CatalogFormat.Check(h); herr != nil {
				return nil, fmt.Errorf("MIG profile catalog: %w", herr)
			}
		}
		return nil, fmt.Errorf("MIG profile catalog: %w", err)
	}
	if err := CatalogFormat.Check(fileformat.Header{APIVersion: f.APIVersion, Kind: f.Kind, Version: f.Version}); err != nil {
		return nil, fmt.Errorf("MIG profile catalog: %w", err)
	}
	c := f.Catalog
	c.APIVersion, c.Kind = CatalogAPIVersion, CatalogKind
	for _, m := range c.Models {
		if m.Name == "" || len(m.Match) == 0 || m.Slices <= 0 || m.MemorySlices <= 0 {
			return nil, fmt.Errorf("MIG profile catalog: model %q needs name, match, slices and memorySlices", m.Name)
		}
		for _, x := range m.Match {
			if len(nameTokens(x)) == 0 {
				return nil, fmt.Errorf("MIG profile catalog: model %s has an empty match string", m.Name)
			}
		}
		for _, p := range m.Profiles {
			if _, _, err := ParseProfileName(p.Name); err != nil {
				return nil, fmt.Errorf("MIG profile catalog: model %s: %w", m.Name, err)
			}
			if p.Slices <= 0 || p.Slices > m.Slices || p.Size <= 0 || len(p.Starts) == 0 || p.MaxInstances <= 0 {
				return nil, fmt.Errorf("MIG profile catalog: model %s profile %s has an invalid geometry", m.Name, p.Name)
			}
			for _, s := range p.Starts {
				if s < 0 || s+p.Size > m.MemorySlices {
					return nil, fmt.Errorf("MIG profile catalog: model %s profile %s placement %d+%d exceeds %d slices", m.Name, p.Name, s, p.Size, m.MemorySlices)
				}
			}
		}
	}
	return &c, nil
}

// Model returns the model a product name stands for. A match string
// matches when its words (split at spaces, dashes and underscores, case
// ignored) appear in the product name consecutively and whole: "B200" is
// not a word of "NVIDIA GB200", "H200" not one of "NVIDIA GH200 480GB". When
// several match, the one with the most words wins ("H100 NVL" over "H100"),
// then the longest.
func (c *Catalog) Model(productName string) (*GPUModel, bool) {
	name := nameTokens(productName)
	var best *GPUModel
	bestWords, bestLen := 0, 0
	for i := range c.Models {
		for _, m := range c.Models[i].Match {
			words := nameTokens(m)
			if !containsRun(name, words) {
				continue
			}
			if len(words) > bestWords || (len(words) == bestWords && len(m) > bestLen) {
				best, bestWords, bestLen = &c.Models[i], len(words), len(m)
			}
		}
	}
	return best, best != nil
}

// NamesWord reports whether one of the model's match strings has the word
// (case ignored), e.g. the family word "A100" of a truncated name.
func (m *GPUModel) NamesWord(word string) bool {
	word = strings.ToUpper(word)
	for _, x := range m.Match {
		for _, w := range nameTokens(x) {
			if w == word {
				return true
			}
		}
	}
	return false
}

// nameTokens splits a GPU name into upper-case words at spaces, dashes and
// underscores (GPU feature discovery writes "NVIDIA-H100-80GB-HBM3").
func nameTokens(s string) []string {
	return strings.FieldsFunc(strings.ToUpper(s), func(r rune) bool {
		return r == ' ' || r == '-' || r == '_' || r == '\t'
	})
}

// containsRun reports whether words occur in name as a consecutive run.
func containsRun(name, words []string) bool {
	if len(words) == 0 {
		return false
	}
	for i := 0; i+len(words) <= len(name); i++ {
		ok := true
		for j, w := range words {
			if name[i+j] != w {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// ModelByName returns the model with that catalog name (e.g. "A100-80GB").
func (c *Catalog) ModelByName(name string) (*GPUModel, bool) {
	for i := range c.Models {
		if strings.EqualFold(c.Models[i].Name, name) {
			return &c.Models[i], true
		}
	}
	return nil, false
}

// Profile returns the model's profile by name; a "1c.3g.40gb" compute
// instance name resolves to its GPU-instance profile "3g.40gb".
func (m *GPUModel) Profile(name string) (*Profile, bool) {
	name = GIProfileName(name)
	for i := range m.Profiles {
		if m.Profiles[i].Name == name {
			return &m.Profiles[i], true
		}
	}
	return nil, false
}

// GIProfileName strips a compute-instance prefix and a "+me" suffix kept as
// is: "1c.3g.40gb" -> "3g.40gb".
func GIProfileName(name string) string {
	name = strings.TrimSpace(strings.ToLower(name))
	if i := strings.Index(name, "c."); i > 0 && strings.Count(name, ".") >= 2 {
		if _, err := strconv.Atoi(name[:i]); err == nil {
			return name[i+2:]
		}
	}
	return name
}

// ParseProfileName splits "3g.40gb" (optionally "1c.3g.40gb", "+me",
// "+gfx") into its compute slices and nominal memory in GB.
func ParseProfileName(name string) (slices int, memGB int, err error) {
	n := GIProfileName(name)
	if i := strings.IndexByte(n, '+'); i >= 0 {
		n = n[:i]
	}
	g, mem, ok := strings.Cut(n, "g.")
	if !ok || !strings.HasSuffix(mem, "gb") {
		return 0, 0, fmt.Errorf("%q is not a MIG profile name like 3g.40gb", name)
	}
	slices, err1 := strconv.Atoi(g)
	memGB, err2 := strconv.Atoi(strings.TrimSuffix(mem, "gb"))
	if err1 != nil || err2 != nil || slices <= 0 || slices > 8 || memGB <= 0 || memGB > 4096 {
		return 0, 0, fmt.Errorf("%q is not a MIG profile name like 3g.40gb", name)
	}
	return slices, memGB, nil
}

// InferProfile names the profile of a MIG device of the given model from its
// SM count (0 unknown) and memory. It returns false when nothing fits or
// when more than one profile fits (1g.20gb and 2g.20gb have the same memory;
// without SMs they cannot be told apart).
func (m *GPUModel) InferProfile(sms int, memMiB uint64) (string, bool) {
	if memMiB == 0 {
		return "", false
	}
	var cands []Profile
	for _, p := range m.Profiles {
		if math.Abs(float64(memMiB)-float64(p.MemoryMiB)) > 0.08*float64(p.MemoryMiB) {
			continue
		}
		if sms > 0 && p.SMs > 0 && sms != p.SMs {
			continue
		}
		cands = append(cands, p)
	}
	if len(cands) != 1 {
		return "", false
	}
	return cands[0].Name, true
}

// Layout is a MIG layout in mig-parted's vocabulary: profile -> count.
type Layout map[string]int

// String renders the layout as mig-parted writes it, sorted.
func (l Layout) String() string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %d", k, l[k])
	}
	b.WriteByte('}')
	return b.String()
}

// Fits reports whether the layout can be placed on one GPU of this model:
// every profile known, instance limits kept, and a placement exists with no
// two instances sharing a memory slice and compute slices within the total.
func (m *GPUModel) Fits(l Layout) bool {
	var want []*Profile
	compute := 0
	for name, n := range l {
		if n == 0 {
			continue
		}
		p, ok := m.Profile(name)
		if n < 0 || !ok || n > p.MaxInstances {
			return false
		}
		for i := 0; i < n; i++ {
			want = append(want, p)
		}
		compute += n * p.Slices
	}
	if compute > m.Slices {
		return false
	}
	// Largest first keeps the search small; at most 7 instances.
	sort.Slice(want, func(i, j int) bool { return want[i].Size > want[j].Size })
	used := make([]bool, m.MemorySlices)
	var place func(k int) bool
	place = func(k int) bool {
		if k == len(want) {
			return true
		}
		p := want[k]
		for _, s := range p.Starts {
			free := true
			for x := s; x < s+p.Size; x++ {
				if used[x] {
					free = false
					break
				}
			}
			if !free {
				continue
			}
			for x := s; x < s+p.Size; x++ {
				used[x] = true
			}
			if place(k + 1) {
				return true
			}
			for x := s; x < s+p.Size; x++ {
				used[x] = false
			}
		}
		return false
	}
	return place(0)
}
