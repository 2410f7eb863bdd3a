package verdict

// APIVersion is the apiVersion of every document rankgate prints with
// -o json|yaml (and of its config file).
const APIVersion = "rankgate.io/v1"

// The kinds of the report documents.
const (
	KindReport     = "Report"
	KindReportList = "ReportList"
)

// Document is a Report as the faces print it with -o json|yaml: apiVersion
// and kind, then the report's own fields, so that a script tells the
// document apart from the other kinds rankgate writes (LaunchReport, a
// List of Gangs). It decodes into a Report as well.
type Document struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Report
}

// NewDocument wraps r.
func NewDocument(r Report) Document {
	return Document{APIVersion: APIVersion, Kind: KindReport, Report: r}
}

// DocumentList is several reports as one document (offline diagnose, one
// per workload; demo, one per run), each item a Document.
type DocumentList struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Items      []Document `json:"items"`
}

// NewDocumentList wraps rs.
func NewDocumentList(rs []Report) DocumentList {
	items := make([]Document, 0, len(rs))
	for _, r := range rs {
		items = append(items, NewDocument(r))
	}
	return DocumentList{APIVersion: APIVersion, Kind: KindReportList, Items: items}
}
