package openapitest

import "github.com/getkin/kin-openapi/openapi3"

// openMark is the extension that keeps a schema open under strictAnswers: a shape of Dynamo's
// that may carry fields kvindex ignores (RouterEvent: docs/API.md "RouterEvent").
const openMark = "x-kvindex-open"

// strictAnswers closes every object schema reachable from doc's answers (unevaluatedProperties:
// false), so an answer field missing from the document fails validation: the document cannot
// fall behind the server's answers. A schema stays as written when it sets additionalProperties
// or unevaluatedProperties itself, carries openMark (with everything under it), or is a member of
// an allOf/anyOf/oneOf (its composition's root is closed instead: unevaluatedProperties sees
// what the members evaluated). doc must be a copy used for answers only: the same component
// schemas describe requests, which the server reads leniently in places (Dynamo's bodies).
func strictAnswers(doc *openapi3.T) {
	var answers []*openapi3.SchemaRef
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, resp := range op.Responses.Map() {
				if resp.Value == nil {
					continue
				}
				for _, mt := range resp.Value.Content {
					if mt.Schema != nil {
						answers = append(answers, mt.Schema)
					}
				}
			}
		}
	}
	members := map[*openapi3.Schema]bool{}
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef, visit func(*openapi3.Schema))
	walk = func(ref *openapi3.SchemaRef, visit func(*openapi3.Schema)) {
		if ref == nil || ref.Value == nil || seen[ref.Value] || ref.Value.Extensions[openMark] == true {
			return
		}
		s := ref.Value
		seen[s] = true
		visit(s)
		for _, p := range s.Properties {
			walk(p, visit)
		}
		walk(s.Items, visit)
		walk(s.AdditionalProperties.Schema, visit)
		for _, set := range [][]*openapi3.SchemaRef{s.AllOf, s.AnyOf, s.OneOf} {
			for _, m := range set {
				walk(m, visit)
			}
		}
	}
	// First pass: which schemas are members of a composition, and which compositions have an open
	// member (their root must stay open too, or the open member's extra fields are refused there).
	openRoots := map[*openapi3.Schema]bool{}
	for _, a := range answers {
		walk(a, func(s *openapi3.Schema) {
			for _, set := range [][]*openapi3.SchemaRef{s.AllOf, s.AnyOf, s.OneOf} {
				for _, m := range set {
					if m.Value != nil {
						members[m.Value] = true
						if m.Value.Extensions[openMark] == true {
							openRoots[s] = true
						}
					}
				}
			}
		})
	}
	closed := false
	seen = map[*openapi3.Schema]bool{}
	for _, a := range answers {
		walk(a, func(s *openapi3.Schema) {
			if members[s] || openRoots[s] || s.AdditionalProperties.Has != nil || s.AdditionalProperties.Schema != nil ||
				s.UnevaluatedProperties.Has != nil || s.UnevaluatedProperties.Schema != nil {
				return
			}
			if len(s.Properties) > 0 || len(s.AllOf)+len(s.AnyOf)+len(s.OneOf) > 0 || s.Type.Is("object") {
				s.UnevaluatedProperties = openapi3.BoolSchema{Has: &closed}
			}
		})
	}
}
