// Who is signed in (`GET /v1/whoami`: the token's name, role and tenants) and what the console offers them: each
// page shows only the actions the token's role may take. The API is what enforces the roles (a 403 for anything
// else); this only keeps the page from offering what would be refused.

import { api } from './api.js';

let me = null;

// Asks the control plane who the token is; throws (401) when it is not a token of this control plane.
export async function load() {
  me = await api.get('/v1/whoami');
  return me;
}

export function forget() { me = null; }

export const who = () => me;

const role = () => (me ? me.role : '');

function owns(tenant) {
  if (!me || me.role !== 'tenant-owner') return false;
  return (me.tenants || []).includes(tenant) || (me.tenant_prefix !== undefined && tenant.startsWith(me.tenant_prefix));
}

export const can = {
  // Everything but tokens: tenants, resources, routes, migrations, gateways.
  change: () => ['admin', 'operator'].includes(role()),
  // Reading beyond one's own tenants: resources, gateways, migrations, the audit log.
  readAll: () => ['admin', 'operator', 'viewer'].includes(role()),
  tokens: () => role() === 'admin',
  credentials: (tenant) => can.change() || owns(tenant),
  // A tenant field: operators change any; a tenant-owner the policies its token lists.
  edit: (tenant, field) => can.change() || (owns(tenant) && (me.policies || []).includes(field)),
};
