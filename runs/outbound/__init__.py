"""Outbound HTTP: the built-in ``http`` handler and the SSRF guard every outbound request
of the project goes through (docs/http-handler.md).

guard.py decides which addresses a request may reach and resolves each host once;
transport.py connects to exactly the address the guard checked; client.py sends one
request, following redirects by hand so that every hop is checked; payload.py validates
an ``http`` job's payload and builds one; secrets.py encrypts the secret headers it
stores; handler.py is the handler itself.
"""
