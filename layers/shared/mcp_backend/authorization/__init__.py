"""The stack's own OAuth 2.1 authorization server (docs/authorization-server.md): dynamic client registration,
client ID metadata documents, authorization code with PKCE and consent, rotated refresh tokens and
revocation, user login delegated to an upstream OpenID Connect provider."""
