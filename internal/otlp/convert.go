package otlp

import (
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Resource attribute keys of the semantic conventions.
const (
	KeyServiceName    = "service.name"
	KeyPID            = "process.pid"
	KeyExecutableName = "process.executable.name"
	KeyExecutablePath = "process.executable.path"
	KeyHostName       = "host.name"
	// KeyBuildID is the GNU build id (the .note.gnu.build-id note, in
	// hex), on the resource (the executable's) and on each mapping.
	KeyBuildID = "process.executable.build_id.gnu"
	// KeyThreadID is the sample attribute of per-thread profiles.
	KeyThreadID = "thread.id"
)

// kprofd's own attributes: a sample's pprof labels become
// LabelPrefix+label, the profile's comments and the session's summary
// profile attributes (string arrays).
const (
	LabelPrefix  = "kprofd."
	KeyComments  = "kprofd.comments"
	KeySummary   = "kprofd.summary"
	ScopeName    = "kprofd"
	deletedTrail = " (deleted)" // how /proc/PID/maps marks a replaced file
)

// Attribute is one key and string value, as OTEL_RESOURCE_ATTRIBUTES
// gives them.
type Attribute struct{ Key, Value string }

// Resource says whose profile it is. Fields left empty come from the
// profile: Executable and BuildID from its first mapping (pprof's main
// binary), ServiceName from the executable's file name.
type Resource struct {
	ServiceName string
	PID         int
	Executable  string
	BuildID     string
	HostName    string
	// Attributes are more resource attributes (OTEL_RESOURCE_ATTRIBUTES):
	// they take the place of those above under the same key, as the
	// SDKs let the user's attributes take the place of detected ones;
	// their service.name only when ServiceName (OTEL_SERVICE_NAME) is
	// empty.
	Attributes []Attribute
}

// Options are what a profile carries beyond the pprof profile.
type Options struct {
	// Summary is the session's closing summary, one line each
	// (attribute kprofd.summary); nil for none.
	Summary []string
	// Attributes go on every profile (kprofd.push, ...).
	Attributes []Attribute
	// Version is kprofd's, the instrumentation scope's version.
	Version string
}

// Convert maps p to OTLP profiles: one resource (Resource), one scope
// (kprofd), and one profile per sample type of p, in p's order, each
// with every sample of p and its value of that type. The profiles
// share one dictionary: mappings, locations, functions, stacks,
// attributes and strings. pprof labels become sample attributes,
// LabelPrefix+key ("thread" becomes thread.id), numeric ones with their
// unit; p's comments become the profile attribute kprofd.comments.
func Convert(p *profile.Profile, res Resource, opt Options) (pprofile.Profiles, error) {
	out := pprofile.NewProfiles()
	if p == nil {
		return out, errors.New("converting to OTLP: no profile")
	}
	b := newBuilder(out.Dictionary())
	rp := out.ResourceProfiles().AppendEmpty()
	b.resource(rp.Resource().Attributes(), p, res)
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(ScopeName)
	sp.Scope().SetVersion(opt.Version)

	var shared []int32 // the profile attributes every profile has
	if len(p.Comments) > 0 {
		shared = append(shared, b.stringsAttr(KeyComments, p.Comments))
	}
	if len(opt.Summary) > 0 {
		shared = append(shared, b.stringsAttr(KeySummary, opt.Summary))
	}
	for _, a := range opt.Attributes {
		shared = append(shared, b.attr(a.Key, "", func(v pcommon.Value) { v.SetStr(a.Value) }))
	}
	stacks := make([]int32, len(p.Sample))
	attrs := make([][]int32, len(p.Sample))
	for i, s := range p.Sample {
		if len(s.Value) != len(p.SampleType) {
			return out, fmt.Errorf("converting to OTLP: sample %d has %d values for %d sample types", i, len(s.Value), len(p.SampleType))
		}
		stacks[i] = b.stack(s.Location)
		attrs[i] = b.sampleAttrs(s)
	}
	for t, st := range p.SampleType {
		prof := sp.Profiles().AppendEmpty()
		prof.SampleType().SetTypeStrindex(b.str(st.Type))
		prof.SampleType().SetUnitStrindex(b.str(st.Unit))
		if pt := p.PeriodType; pt != nil {
			prof.PeriodType().SetTypeStrindex(b.str(pt.Type))
			prof.PeriodType().SetUnitStrindex(b.str(pt.Unit))
		}
		prof.SetPeriod(p.Period)
		prof.SetTime(pcommon.Timestamp(max(p.TimeNanos, 0)))
		prof.SetDurationNano(uint64(max(p.DurationNanos, 0)))
		var id pprofile.ProfileID
		rand.Read(id[:])
		prof.SetProfileID(id)
		prof.AttributeIndices().FromRaw(shared)
		for i, s := range p.Sample {
			smp := prof.Samples().AppendEmpty()
			smp.SetStackIndex(stacks[i])
			smp.Values().Append(s.Value[t])
			smp.AttributeIndices().FromRaw(attrs[i])
		}
	}
	return out, nil
}

// builder fills a dictionary, each entry once. Index 0 of every table
// is the zero entry the protocol asks for.
type builder struct {
	dict     pprofile.ProfilesDictionary
	strings  map[string]int32
	attrs    map[string]int32 // by key, unit and value, as attrKey makes it
	mappings map[*profile.Mapping]int32
	funcs    map[*profile.Function]int32
	locs     map[*profile.Location]int32
	stacks   map[string]int32
}

func newBuilder(dict pprofile.ProfilesDictionary) *builder {
	b := &builder{dict: dict, strings: map[string]int32{}, attrs: map[string]int32{},
		mappings: map[*profile.Mapping]int32{}, funcs: map[*profile.Function]int32{},
		locs: map[*profile.Location]int32{}, stacks: map[string]int32{}}
	b.str("")
	dict.MappingTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.AttributeTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	return b
}

func (b *builder) str(s string) int32 {
	if i, ok := b.strings[s]; ok {
		return i
	}
	i := int32(b.dict.StringTable().Len())
	b.dict.StringTable().Append(s)
	b.strings[s] = i
	return i
}

// attr returns the index of the attribute key (with unit) whose value
// set makes.
func (b *builder) attr(key, unit string, set func(pcommon.Value)) int32 {
	kv := pprofile.NewKeyValueAndUnit()
	kv.SetKeyStrindex(b.str(key))
	if unit != "" {
		kv.SetUnitStrindex(b.str(unit))
	}
	set(kv.Value())
	k := key + "\x00" + unit + "\x00" + kv.Value().AsString()
	if i, ok := b.attrs[k]; ok {
		return i
	}
	i := int32(b.dict.AttributeTable().Len())
	kv.MoveTo(b.dict.AttributeTable().AppendEmpty())
	b.attrs[k] = i
	return i
}

func (b *builder) stringsAttr(key string, values []string) int32 {
	return b.attr(key, "", func(v pcommon.Value) {
		s := v.SetEmptySlice()
		for _, x := range values {
			s.AppendEmpty().SetStr(x)
		}
	})
}

// sampleAttrs returns the attributes of s's labels, sorted by key.
func (b *builder) sampleAttrs(s *profile.Sample) []int32 {
	var idx []int32
	for _, k := range sortedKeys(s.Label) {
		for _, v := range s.Label[k] {
			idx = append(idx, b.attr(LabelPrefix+k, "", func(x pcommon.Value) { x.SetStr(v) }))
		}
	}
	for _, k := range sortedKeys(s.NumLabel) {
		key := LabelPrefix + k
		if k == "thread" {
			key = KeyThreadID
		}
		for j, v := range s.NumLabel[k] {
			unit := ""
			if units := s.NumUnit[k]; j < len(units) {
				unit = units[j]
			}
			idx = append(idx, b.attr(key, unit, func(x pcommon.Value) { x.SetInt(v) }))
		}
	}
	return idx
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// stack returns the index of the stack of locs, leaf first as in pprof.
func (b *builder) stack(locs []*profile.Location) int32 {
	idx := make([]int32, len(locs))
	var key strings.Builder
	for i, l := range locs {
		idx[i] = b.location(l)
		fmt.Fprintf(&key, "%d,", idx[i])
	}
	if i, ok := b.stacks[key.String()]; ok {
		return i
	}
	i := int32(b.dict.StackTable().Len())
	b.dict.StackTable().AppendEmpty().LocationIndices().FromRaw(idx)
	b.stacks[key.String()] = i
	return i
}

func (b *builder) location(l *profile.Location) int32 {
	if i, ok := b.locs[l]; ok {
		return i
	}
	loc := b.dict.LocationTable().AppendEmpty()
	i := int32(b.dict.LocationTable().Len() - 1)
	b.locs[l] = i
	loc.SetAddress(l.Address)
	if l.Mapping != nil {
		loc.SetMappingIndex(b.mapping(l.Mapping))
	}
	for _, ln := range l.Line {
		line := loc.Lines().AppendEmpty()
		line.SetLine(ln.Line)
		line.SetColumn(ln.Column)
		if ln.Function != nil {
			line.SetFunctionIndex(b.function(ln.Function))
		}
	}
	return i
}

func (b *builder) function(f *profile.Function) int32 {
	if i, ok := b.funcs[f]; ok {
		return i
	}
	fn := b.dict.FunctionTable().AppendEmpty()
	i := int32(b.dict.FunctionTable().Len() - 1)
	b.funcs[f] = i
	fn.SetNameStrindex(b.str(f.Name))
	fn.SetSystemNameStrindex(b.str(f.SystemName))
	fn.SetFilenameStrindex(b.str(f.Filename))
	fn.SetStartLine(f.StartLine)
	return i
}

func (b *builder) mapping(m *profile.Mapping) int32 {
	if i, ok := b.mappings[m]; ok {
		return i
	}
	mp := b.dict.MappingTable().AppendEmpty()
	i := int32(b.dict.MappingTable().Len() - 1)
	b.mappings[m] = i
	mp.SetMemoryStart(m.Start)
	mp.SetMemoryLimit(m.Limit)
	mp.SetFileOffset(m.Offset)
	mp.SetFilenameStrindex(b.str(m.File))
	if m.BuildID != "" {
		mp.AttributeIndices().Append(b.attr(KeyBuildID, "", func(v pcommon.Value) { v.SetStr(m.BuildID) }))
	}
	return i
}

// resource sets the resource attributes of p's process (see Resource).
func (b *builder) resource(attrs pcommon.Map, p *profile.Profile, res Resource) {
	exe, build := res.Executable, res.BuildID
	if len(p.Mapping) > 0 {
		if exe == "" {
			exe = strings.TrimSuffix(p.Mapping[0].File, deletedTrail)
		}
		if build == "" {
			build = p.Mapping[0].BuildID
		}
	}
	name := ""
	if exe != "" {
		name = filepath.Base(exe)
	}
	put := func(k, v string) {
		if v != "" {
			attrs.PutStr(k, v)
		}
	}
	put(KeyExecutableName, name)
	put(KeyExecutablePath, exe)
	put(KeyBuildID, build)
	put(KeyHostName, res.HostName)
	if res.PID > 0 {
		attrs.PutInt(KeyPID, int64(res.PID))
	}
	service := res.ServiceName
	for _, a := range res.Attributes {
		if a.Key != KeyServiceName {
			attrs.PutStr(a.Key, a.Value)
		} else if res.ServiceName == "" {
			service = a.Value
		}
	}
	if service == "" {
		service = name
	}
	put(KeyServiceName, service)
}
