// The identity provider of the SSO tests: panva's oidc-provider (OpenID Certified), on loopback.
//
//   PORT=9400 REDIRECT_URIS=http://127.0.0.1:8000/auth/oidc/callback/ \
//   POST_LOGOUT_REDIRECT_URIS=http://127.0.0.1:8000/login/ CLIENT_SECRET=s3cret node provider.mjs
//
// Its people and their groups are below (the tests change them through /_test/people). Its
// dev interactions sign anyone in with any password (the login name picks the person);
// consent is granted without a prompt, as for a first-party app. Three clients share one secret: "cp" is honest; the ID tokens "cp-expired" receives are
// re-signed with the provider's own key and an expiry in the past; those of "cp-tampered" have
// their payload rewritten (groups: admins) under the original signature. They stand for the
// tokens a relying party must refuse.
import Provider from 'oidc-provider';
import * as jose from 'jose';

const port = Number(process.env.PORT || 9400);
const issuer = `http://127.0.0.1:${port}`;
const list = (name) => (process.env[name] || '').split(',').filter(Boolean);

const PEOPLE = {
  alice: ['cp-admins', 'staff'],
  bob: ['cp-operators', 'staff'],
  carol: ['cp-viewers'],
  dave: ['staff', 'contractors'],
  erin: ['cp-viewers', 'cp-operators'],
};

const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
const signingKey = { ...(await jose.exportJWK(privateKey)), kid: 'test-key-1', alg: 'RS256', use: 'sig' };

const client = (clientId) => ({
  client_id: clientId,
  client_secret: process.env.CLIENT_SECRET || 'test-client-secret',
  redirect_uris: list('REDIRECT_URIS'),
  post_logout_redirect_uris: list('POST_LOGOUT_REDIRECT_URIS'),
  grant_types: ['authorization_code'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
});

const provider = new Provider(issuer, {
  clients: ['cp', 'cp-expired', 'cp-tampered'].map(client),
  jwks: { keys: [signingKey] },
  cookies: { keys: ['test-only-cookie-key'] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name'],
    groups: ['groups'],
  },
  // Groups in the ID token too, as Keycloak, Dex and Okta put them there.
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return {
          sub: id, email: `${id}@example.test`, email_verified: true, preferred_username: id,
          name: id[0].toUpperCase() + id.slice(1), groups: PEOPLE[id] || [],
        };
      },
    };
  },
  // First-party client: grant what it asks for, without a consent page.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile groups');
    grant.addOIDCClaims(['groups', 'email', 'preferred_username', 'name']);
    await grant.save();
    return grant;
  },
});

// The tests change a person's groups as an IdP administrator would:
//   PUT /_test/people/<name> with {"groups": [...]}
provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/_test\/people\/([a-z]+)$/);
  if (!match || ctx.method !== 'PUT') return next();
  const chunks = [];
  for await (const chunk of ctx.req) chunks.push(chunk);
  PEOPLE[match[1]] = JSON.parse(Buffer.concat(chunks).toString()).groups;
  ctx.status = 204;
});

provider.use(async (ctx, next) => {
  await next();
  if (ctx.path !== '/token' || !ctx.body || !ctx.body.id_token) return;
  const clientId = ctx.oidc && ctx.oidc.client && ctx.oidc.client.clientId;
  if (clientId === 'cp-expired') {
    const claims = jose.decodeJwt(ctx.body.id_token);
    const now = Math.floor(Date.now() / 1000);
    ctx.body = {
      ...ctx.body,
      id_token: await new jose.SignJWT({ ...claims, iat: now - 1200, exp: now - 600 })
        .setProtectedHeader({ alg: 'RS256', kid: signingKey.kid })
        .sign(privateKey),
    };
  } else if (clientId === 'cp-tampered') {
    const [header, payload, signature] = ctx.body.id_token.split('.');
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    claims.groups = ['cp-admins'];
    const forged = Buffer.from(JSON.stringify(claims)).toString('base64url');
    ctx.body = { ...ctx.body, id_token: `${header}.${forged}.${signature}` };
  }
});

provider.listen(port, '127.0.0.1', () => console.log(`oidc-provider ${issuer} ready`));
