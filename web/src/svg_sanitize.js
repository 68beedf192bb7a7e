// The dashboard's pipeline drawing comes from the server, but it names stages the pipeline's
// author wrote: DOMPurify's SVG profile keeps shapes and text and drops script and handlers.
import DOMPurify from 'dompurify';

export function sanitizeSvg(svg) {
  // Its <style> goes before parsing: the CSP refuses inline style (even while DOMPurify parses
  // it, which the browser reports as a violation); dashboard.css styles the drawing instead.
  const unstyled = svg.replace(/<style\b[\s\S]*?<\/style>/gi, '');
  return DOMPurify.sanitize(unstyled, {
    USE_PROFILES: { svg: true, svgFilters: true }, ADD_ATTR: ['data-stage'],
    FORBID_TAGS: ['style'], FORBID_ATTR: ['style'] });
}
