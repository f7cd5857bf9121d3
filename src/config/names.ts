// Kubernetes name syntax checks (apimachinery validation rules).

const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const QUALIFIED_NAME_PART = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;

/** A DNS-1123 subdomain: object names such as StorageClass names. */
export function isDnsSubdomain(s: string): boolean {
  return s.length > 0 && s.length <= 253 && DNS1123_SUBDOMAIN.test(s);
}

/** A qualified name ([prefix/]name): label keys, taint keys. */
export function isQualifiedName(s: string): boolean {
  const parts = s.split('/');
  if (parts.length > 2) return false;
  const name = parts[parts.length - 1]!;
  if (name.length === 0 || name.length > 63 || !QUALIFIED_NAME_PART.test(name)) return false;
  if (parts.length === 2) return isDnsSubdomain(parts[0]!);
  return true;
}

const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

/** A label value: empty, or at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit. */
export function isLabelValue(s: string): boolean {
  return s.length <= 63 && LABEL_VALUE.test(s);
}
