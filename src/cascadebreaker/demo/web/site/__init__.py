"""The web demo's Django project: settings, URLs, views and the built front end's assets."""
