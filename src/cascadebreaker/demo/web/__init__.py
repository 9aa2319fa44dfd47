"""`ccb demo web`: the settlement report page (Django + inertia-django + Vue) and its upstream.

settlement_api.py  the settlement API (FastAPI, switchable faults), served by demo.serve
ledger.py          the sample data both sides read
source.py          the page's settlement source: httpx + breaker + last good value
site/              the Django project: settings, urls, views, assets, layout template
system.py          the processes of the web demo (reuses the saga demo's launcher)
command.py         `ccb demo web`
"""
