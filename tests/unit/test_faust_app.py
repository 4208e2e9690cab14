"""app.faust_app.EtjApp: what it changes of Faust's App."""

from types import SimpleNamespace

from app.faust_app import app


def test_the_app_makes_events_of_its_configured_class_with_the_records_fields() -> None:
    # app.faust_app.EtjApp.create_event looks the class up once; Faust looks it up per record
    m = SimpleNamespace(key=b"k", value=b"v")
    event = app.create_event("k", {"v": 1}, [("h", b"1")], m)
    again = app.create_event("k2", None, None, m)
    assert type(event) is type(again) is app.conf.Event
    assert (event.key, event.value, event.message) == ("k", {"v": 1}, m)
    assert dict(event.headers) == {"h": b"1"}
    assert (again.key, again.value) == ("k2", None)
