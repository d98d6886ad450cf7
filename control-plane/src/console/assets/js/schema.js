// The route table's JSON Schema, checked in the browser as the operator types: the schema is the one the control
// plane serves in its OpenAPI document (the same types its own check uses), so the console knows no rule of its
// own. It covers the keywords those schemas use; the server still decides (names of resources, bucket coverage
// and the other semantic rules are its alone).

let openapi = null;

// A function from a value to its problems ([{ path, message }]), once the API's document has been read.
export async function routeTableChecker() {
  if (!openapi) {
    const response = await fetch('/openapi.json');
    openapi = await response.json();
  }
  return (value) => check({ $ref: '#/components/schemas/RouteTable' }, value, '').map(({ path, message }) => ({ path, message }));
}

const resolve = (ref) => ref.slice(2).split('/').reduce((node, key) => node[key], openapi);

const kind = (value) => (value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value);

function typeMatches(type, value) {
  if (type === 'integer') return Number.isInteger(value);
  return kind(value) === type;
}

// Problems with a weight, so that among the branches of a oneOf/anyOf the one meant is reported: a branch of
// the wrong type (or whose tag field does not match) is a worse fit than one with a misspelt field.
function check(schema, value, path) {
  if (schema.$ref) return check(resolve(schema.$ref), value, path);
  const branches = schema.oneOf || schema.anyOf;
  if (branches) {
    let best = null;
    for (const branch of branches) {
      const found = check(branch, value, path);
      if (!found.length) return [];
      const weight = found.reduce((n, p) => n + p.weight, 0);
      if (!best || weight < best.weight) best = { weight, found };
    }
    return best.found;
  }
  const problems = [];
  if (schema.type && !typeMatches(schema.type, value)) {
    return [{ path, message: `must be ${schema.type === 'integer' ? 'an integer' : `a ${schema.type}`}`, weight: 100 }];
  }
  if (schema.enum && !schema.enum.includes(value)) {
    problems.push({ path, message: `must be ${schema.enum.map((v) => JSON.stringify(v)).join(' or ')}`, weight: 50 });
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) problems.push({ path, message: `must be at least ${schema.minimum}`, weight: 1 });
    if (schema.format === 'uint32' && value > 4294967295) problems.push({ path, message: 'must be at most 4294967295', weight: 1 });
  }
  if (kind(value) === 'object') {
    const properties = schema.properties || {};
    for (const name of schema.required || []) {
      if (!(name in value)) problems.push({ path, message: `missing field '${name}'`, weight: 2 });
    }
    for (const [name, item] of Object.entries(value)) {
      const child = `${path}/${name.replace(/~/g, '~0').replace(/\//g, '~1')}`;
      if (properties[name]) problems.push(...check(properties[name], item, child));
      else if (schema.additionalProperties === false) problems.push({ path: child, message: `unknown field '${name}'`, weight: 3 });
    }
  }
  if (Array.isArray(value) && schema.items) {
    value.forEach((item, i) => problems.push(...check(schema.items, item, `${path}/${i}`)));
  }
  return problems;
}
