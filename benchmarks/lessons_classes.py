"""The lessons benchmark's topics beyond the repository's keyword set (``lessons_bench.py``).

Two classes, each with a ``dev`` and a ``held-out`` half, written in the set's own form:
``(scope, lesson, keywords, one-liner, paraphrase, pasted-log line)``.

* ``OTHER_SCOPE_*``: the target lives in a scope the run reads beside its repository (the
  organisation, the run's channel, its person), where it competes with that scope's own
  noise and with every other scope's hits.
* ``MULTILINGUAL_*``: German and Spanish lessons with briefs in the same language, the
  brief's word in another inflection than the lesson's (``Lizenzprüfungen`` /
  ``Lizenzprüfung``, ``restauran`` / ``restaurar``). They are meant to be read with
  ``--languages english,german,spanish``; under English alone they show what a German or
  Spanish team loses without its languages listed.

Written before anything was measured on them; the held-out halves are never tuned on.
"""

from __future__ import annotations

OTHER_SCOPE_DEV = [
    ("org",
     "Expense reports over 500 euros need a manager's approval in Ramp before reimbursement",
     ("expenses", "ramp"), "how do I file an expense report for the conference",
     "who signs off when I paid for the hotel myself",
     "ramp: reimbursement request #8812 pending manager approval"),
    ("org", "Public talks and blog posts about internal systems need a comms review first",
     ("talks", "comms"), "can I give a talk about our queue design at a meetup",
     "I'd like to present our architecture at a local event",
     "meetup.com: talk proposal 'Scaling our queues' submitted"),
    ("channel:0",
     "In this channel, outages are announced with the status page template, then updated "
     "every 30 minutes",
     ("outage", "statuspage"), "announce the outage to customers",
     "tell users the product is unavailable right now",
     "statuspage: incident 'API unavailable' created, outage ongoing for 45 minutes"),
    ("channel:1",
     "Copy changes in this channel follow the house style: sentence case, no "
     "exclamation marks",
     ("copy", "style"), "review the copy for the signup page",
     "check the wording on the registration screen",
     "lint-copy: 'Get Started!' violates the house style (sentence case)"),
    ("user:0", "This user is colour-blind; describe charts in words, never by colour alone",
     ("charts", "colour"), "explain this latency chart",
     "walk me through what the graph shows",
     "plot saved: latency_chart.png (red = errors, green = ok)"),
    ("user:2",
     "This user is on parental leave until June; route analytics questions to the data "
     "channel",
     ("leave", "analytics"), "ask this user about the analytics dashboard numbers",
     "who can explain the figures in the metrics report while she is away",
     "out-of-office: auto-reply, on leave until June"),
]

OTHER_SCOPE_HELD_OUT = [
    ("org", "Production access is requested through the access portal and expires after "
     "8 hours",
     ("access", "portal"), "I need production access to debug an issue",
     "how do I get into the live environment for an investigation",
     "AccessDenied: user jdoe has no active prod grant (access portal)"),
    ("org", "Open-source licenses must clear the license scan before adding a dependency",
     ("license", "dependency"), "is it ok to add this GPL dependency",
     "can we pull in a copyleft package", "license-scan: package foo-lib uses AGPL-3.0"),
    ("channel:0",
     "Refund requests in this channel are handled by the payments desk within two days",
     ("refund", "desk"), "a customer wants a refund", "someone asks for their money back",
     "ticket #6230: refund requested for order 99812"),
    ("channel:1",
     "Usability test recordings in this channel are stored in Dovetail, never in Slack",
     ("usability", "dovetail"), "where do I upload the usability session videos",
     "I have recordings of user interviews, where should they go",
     "upload failed: usability_interview_03.mp4 exceeds the slack file limit"),
    ("user:0", "This user reads answers on a phone; keep code blocks under 40 characters wide",
     ("phone", "width"), "show me the command to tail the logs on my phone",
     "I'm on mobile, give me something short I can paste",
     "ssh: connected from a phone terminal, 42 columns"),
    ("user:2", "This user owns the on-prem customer installs and their upgrade calendar",
     ("on-prem", "upgrades"), "when is the on-prem upgrade for initech",
     "which self-hosted customers get the new version this month",
     "installer: on-prem upgrade for customer initech scheduled 2026-04-02"),
]

MULTILINGUAL_DEV = [
    ("repo:0",
     "Lizenzprüfungen laufen nachts; ein fehlgeschlagener Lauf blockiert den Release-Zug",
     ("lizenzprüfung", "nachtlauf"), "die Lizenzprüfung ist heute fehlgeschlagen",
     "warum stoppt der Release wegen der Lizenzen",
     "license-check: Lizenzprüfung fehlgeschlagen für Paket left-pad"),
    ("org", "Urlaubsanträge werden im Personalportal gestellt und vom Teamleiter genehmigt",
     ("urlaub", "personalportal"), "wo stelle ich meinen Urlaubsantrag",
     "ich möchte zwei Wochen freinehmen, wie geht das",
     "HR: Urlaubsantrag wartet auf Genehmigung durch den Teamleiter"),
    ("channel:1", "Datenbankmigrationen in diesem Kanal werden nur dienstags ausgerollt",
     ("migrationen", "dienstag"), "wann darf ich die Datenbankmigration ausrollen",
     "an welchem Wochentag spielen wir Schemaänderungen ein",
     "deploy-bot: Datenbankmigration abgelehnt, heute ist nicht Dienstag"),
    ("repo:1", "Los despliegues del frontend se hacen desde la rama estable, nunca desde main",
     ("despliegue", "rama"), "desplegamos el frontend desde la rama principal?",
     "cómo publico la web en producción",
     "git push: despliegue rechazado, la rama main no está permitida"),
    ("user:1", "Este usuario prefiere respuestas en español con ejemplos de consultas",
     ("español", "ejemplos"), "dame un ejemplo de consulta con join",
     "cómo cruzo dos tablas",
     "ERROR: la consulta devolvió filas duplicadas, falta un ejemplo"),
    ("org",
     "Las facturas de proveedores se suben al portal contable antes del día 5 de cada mes",
     ("facturas", "contable"), "dónde subo la factura del proveedor",
     "tengo un recibo de un vendedor externo, qué hago con él",
     "contabilidad: factura 2026-118 del proveedor pendiente de carga"),
]

MULTILINGUAL_HELD_OUT = [
    ("repo:2",
     "Zertifikate werden von cert-manager erneuert; manuelles Erneuern zerstört die "
     "Ingress-Konfiguration",
     ("zertifikate", "erneuerung"), "das Zertifikat für die API ist abgelaufen",
     "die HTTPS-Verbindung meldet ein ungültiges Schloss",
     "x509: Zertifikat abgelaufen am 2026-03-01 (ingress api)"),
    ("org", "Reisekosten werden innerhalb von 30 Tagen über das Spesentool abgerechnet",
     ("reisekosten", "spesen"), "wie rechne ich meine Reisekosten ab",
     "ich war beim Kunden in Hamburg, wie bekomme ich das Geld zurück",
     "Spesentool: Abrechnung der Reisekosten für März überfällig"),
    ("user:0", "Dieser Nutzer möchte Antworten auf Deutsch und kurze Codebeispiele",
     ("deutsch", "codebeispiele"), "zeig mir ein Codebeispiel für einen Wiederholungsversuch",
     "wie schreibe ich eine Schleife, die es nochmal versucht",
     "review-bot: Antwort ohne Codebeispiel abgelehnt"),
    ("repo:0",
     "Las copias de seguridad de la base de datos se restauran con make restore, nunca a mano",
     ("copias", "restaurar"), "necesito restaurar la copia de seguridad de ayer",
     "cómo recupero los datos borrados anoche",
     "pg_restore: error al restaurar la copia 2026-03-02.dump"),
    ("channel:0",
     "En este canal, las quejas de clientes se escalan al equipo de soporte en menos de "
     "una hora",
     ("quejas", "soporte"), "un cliente se queja de la factura",
     "alguien está muy molesto con nosotros", "ticket #7781: queja de cliente sin respuesta"),
    ("user:2", "Este usuario revisa los informes trimestrales de ventas",
     ("informes", "ventas"), "quién revisa el informe de ventas del trimestre",
     "necesito que alguien mire los números comerciales",
     "reporte: informe_ventas_q1.xlsx esperando revisión"),
]
