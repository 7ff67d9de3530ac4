package web_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gendurable/gendurable/internal/webhooktest"
	"github.com/gendurable/gendurable/webhook"
)

// A fair queue's keys on the queues page: the dashboard turns fair share on, shows each
// key's runnable and in-flight counts (busiest first, then by key a page at a time, then
// narrowed by a prefix), sets a key's weight and cap and drops another's, each checked
// against the API, says so in words when nothing matches, and a run links to its key.
// Steps block in the webhook until the test ends, so a key's in-flight count is its cap.
func TestDashboardShowsAndSetsFairnessKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 3*time.Minute)
	defer cancel()
	s := newServer(t, "", true)
	release := make(chan struct{})
	rcv := webhooktest.New(t, func(w http.ResponseWriter, req *webhook.StepRequest) {
		<-release
		webhooktest.Answer(w, webhook.Response{Done: &webhook.Done{}})
	})
	t.Cleanup(func() { close(release) }) // before the receiver closes: it waits for its handlers
	s.post("/v1/handlers/work", fmt.Sprintf(`{"url": %q, "secret": %q, "timeout": "5m"}`, rcv.URL, webhooktest.Secret))

	// A paused queue, still without fair share: acme has 5 jobs, globex 3, initech 1, and
	// one job names no key (the key "" once the queue is fair); each named key runs at most
	// one step at once.
	s.post("/v1/queues/tenants", `{"paused": true, "max_in_flight": 20}`)
	jobs := map[string]int{"acme": 5, "globex": 3, "initech": 1}
	var globexJob int64
	for key, n := range jobs {
		for range n {
			id := s.id(fmt.Sprintf(`{"handler": "work", "queue": "tenants", "fairness_key": %q}`, key))
			if key == "globex" {
				globexJob = id
			}
		}
		s.post("/v1/queues/tenants/fairness-keys/"+key, `{"max_in_flight": 1}`)
	}
	s.id(`{"handler": "work", "queue": "tenants"}`)
	// 28 keys with settings and no work: with the 4 above, two pages in key order.
	for i := range 28 {
		s.post(fmt.Sprintf("/v1/queues/tenants/fairness-keys/zz-%02d", i), `{"weight": 2}`)
	}

	rows := `document.querySelectorAll('table[data-testid=fairness-keys] tbody tr')`
	cell := func(key, col string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-fkey=%q] [data-testid=%s]')?.textContent`, key, col)
	}
	// choose picks a select's option as a user does: the value and its change event at once,
	// so that no refresh of the page in between puts the old value back.
	choose := func(selector, value string) chromedp.Action {
		return chromedp.Evaluate(fmt.Sprintf(`(() => { const s = document.querySelector(%q); s.value = %q;
			s.dispatchEvent(new Event('change', {bubbles: true})); })()`, selector, value), nil)
	}
	keyOrder := func() []string {
		var keys []string
		if err := chromedp.Run(ctx, chromedp.Evaluate(`[...`+rows+`].map(r => r.dataset.fkey)`, &keys)); err != nil {
			t.Fatal(err)
		}
		return keys
	}

	// Fair share off: the page says so. Turned on from the queue's row (the confirmation
	// is accepted), the API agrees, and the busiest keys come, most runnable first.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.url+"/#/queues?queue=tenants"),
		waitText(`[data-testid=fairness-off]`, "Fair share is off for tenants"),
		choose(`select[aria-label="Fairness of tenants"]`, "round_robin"),
		waitText(`.notice-slot`, "Queue tenants's claims give the fairness keys with runnable work turns"),
		waitJS(rows+`.length === 4`),
		waitJS(cell("acme", "fkey-runnable")+` === '5'`),
		waitJS(cell("", "fkey-runnable")+` === '1'`),
		waitJS(cell("globex", "fkey-runnable")+` === '3'`),
		waitJS(cell("initech", "fkey-runnable")+` === '1'`),
	); err != nil {
		t.Fatalf("turning fair share on: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}
	var q struct{ Fairness string }
	s.get("/v1/queues/tenants", &q)
	if q.Fairness != "round_robin" {
		t.Fatalf("the queue's fairness after the dashboard set it: %q", q.Fairness)
	}
	if got := keyOrder(); fmt.Sprintf("%q", got) != `["acme" "globex" "" "initech"]` {
		t.Fatalf("the busiest keys in the order %v", got)
	}

	// Resumed, each named key runs one step (its cap) and the key "" its only one.
	if err := chromedp.Run(ctx,
		chromedp.Click(`//tr[.//button[text()="tenants"]]//button[text()="Resume"]`),
		waitText(`.notice-slot`, "resumed"),
		waitJS(cell("acme", "fkey-runnable")+` === '4' && `+cell("acme", "fkey-in-flight")+` === '1'`),
		waitJS(cell("globex", "fkey-runnable")+` === '2' && `+cell("globex", "fkey-in-flight")+` === '1'`),
		waitJS(rows+`.length === 2`), // initech and "" have nothing runnable left
	); err != nil {
		t.Fatalf("the counts once the queue runs: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}
	screenshot(t, ctx, "fairness-keys.png", true)

	// Every key in key order, a page at a time: "" (the jobs without one), the three
	// tenants, zz-00…zz-20; then zz-21…zz-27.
	if err := chromedp.Run(ctx,
		choose(`select[data-testid=fkey-order]`, "key"),
		waitJS(`location.hash.includes('forder=key')`),
		waitJS(rows+`.length === 25`),
		waitJS(cell("", "fkey-in-flight")+` === '1'`),
		waitText(`table[data-testid=fairness-keys] caption`, "page 1"),
	); err != nil {
		t.Fatalf("listing by key: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}
	if got := keyOrder(); got[0] != "" || got[1] != "acme" || got[4] != "zz-00" || got[24] != "zz-20" {
		t.Fatalf("page 1 in key order: %v", got)
	}
	if err := chromedp.Run(ctx,
		chromedp.Click(`//div[@class="pager"]/button[text()="Next"]`),
		waitJS(rows+`.length === 7`),
		waitText(`table[data-testid=fairness-keys] caption`, "page 2"),
		waitJS(cell("zz-27", "fkey-weight")+` === '2'`),
	); err != nil {
		t.Fatalf("the next page: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}
	if err := chromedp.Run(ctx,
		chromedp.Click(`//div[@class="pager"]/button[text()="Previous"]`),
		waitJS(rows+`.length === 25`),
		waitText(`table[data-testid=fairness-keys] caption`, "page 1"),
	); err != nil {
		t.Fatalf("back to the first page: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}

	// A search by prefix; then globex's weight and cap set from its row's Edit.
	if err := chromedp.Run(ctx,
		chromedp.SetValue(`input[data-testid=fkey-prefix]`, "glo"),
		chromedp.Click(`form[aria-label="Find fairness keys"] button[type=submit]`),
		waitJS(`location.hash.includes('fkey=glo')`),
		waitJS(rows+`.length === 1 && `+cell("globex", "fkey-runnable")+` === '2'`),
		chromedp.Click(`//tr[@data-fkey="globex"]//button[text()="Edit"]`),
		waitJS(`document.querySelector('form[aria-label="Set a fairness key"] input[name=key]').value === 'globex'`),
		chromedp.SetValue(`form[aria-label="Set a fairness key"] input[name=weight]`, "3"),
		chromedp.SetValue(`form[aria-label="Set a fairness key"] input[name=max_in_flight]`, "2"),
		chromedp.Click(`form[aria-label="Set a fairness key"] button[type=submit]`),
		waitText(`section.fairness .notice-slot`, "Key globex of tenants: weight 3, at most 2 in flight"),
		waitJS(cell("globex", "fkey-weight")+` === '3' && `+cell("globex", "fkey-cap")+` === '2'`),
		// Its cap raised to 2, a second globex step runs.
		waitJS(cell("globex", "fkey-in-flight")+` === '2'`),
	); err != nil {
		t.Fatalf("searching and setting a key: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}
	var k struct {
		Weight      int
		MaxInFlight *int `json:"max_in_flight"`
		Declared    bool
		InFlight    int `json:"in_flight"`
	}
	s.get("/v1/queues/tenants/fairness-keys/globex", &k)
	if k.Weight != 3 || k.MaxInFlight == nil || *k.MaxInFlight != 2 || !k.Declared || k.InFlight != 2 {
		t.Fatalf("globex in the API after the dashboard set it: %+v", k)
	}

	// acme's settings dropped from its row: weight 1 and no cap again.
	if err := chromedp.Run(ctx,
		chromedp.SetValue(`input[data-testid=fkey-prefix]`, "acme"),
		chromedp.Click(`form[aria-label="Find fairness keys"] button[type=submit]`),
		waitJS(rows+`.length === 1 && `+cell("acme", "fkey-cap")+` === '1'`),
		chromedp.Click(`//tr[@data-fkey="acme"]//button[text()="Reset"]`),
		waitText(`section.fairness .notice-slot`, "Key acme of tenants is back to weight 1 and no cap"),
		waitJS(cell("acme", "fkey-cap")+` === 'none'`),
	); err != nil {
		t.Fatalf("dropping a key's settings: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}
	k.MaxInFlight, k.Declared = nil, false
	s.get("/v1/queues/tenants/fairness-keys/acme", &k)
	if k.Weight != 1 || k.MaxInFlight != nil || k.Declared {
		t.Fatalf("acme in the API after the dashboard dropped its settings: %+v", k)
	}

	// A prefix nothing starts with: words, not a bare header.
	if err := chromedp.Run(ctx,
		chromedp.SetValue(`input[data-testid=fkey-prefix]`, "nobody"),
		chromedp.Click(`form[aria-label="Find fairness keys"] button[type=submit]`),
		waitText(`[data-testid=fkeys-empty]`, "No key starting with “nobody” has work or settings in tenants."),
	); err != nil {
		t.Fatalf("an empty search: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}
	var tables int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('table[data-testid=fairness-keys]').length`, &tables)); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatal("an empty search shows a table")
	}

	// A run shows its fairness key, which links to the key on its queue's page.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/#/runs/%d", s.url, globexJob)),
		waitText(`[data-testid=fairness-key]`, "globex"),
		chromedp.Click(`[data-testid=fairness-key]`),
		waitJS(`location.hash.startsWith('#/queues') && location.hash.includes('fkey=globex')`),
		waitJS(rows+`.length === 1 && `+cell("globex", "fkey-weight")+` === '3'`),
	); err != nil {
		t.Fatalf("a run's fairness key: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}

	// A key links to its runs: globex's 3, then (from the runs page's own field) the one
	// run that names no key.
	runs := `document.querySelectorAll('table[data-testid=runs] tbody tr[data-job]')`
	if err := chromedp.Run(ctx,
		chromedp.Click(`//tr[@data-fkey="globex"]//a`),
		waitJS(`location.hash.startsWith('#/runs') && location.hash.includes('fairness_key=globex')`),
		waitJS(runs+`.length === 3`),
		waitJS(`document.querySelector('input[data-testid=fairness-key-filter]').value === 'globex'`),
		chromedp.Evaluate(`document.querySelector('input[data-testid=fairness-key-filter]').value = ''`, nil), // the default key
		chromedp.Click(`form[aria-label="Filter runs"] button[type=submit]`),
		waitJS(`location.hash.includes('fairness_key=') && !location.hash.includes('fairness_key=globex')`),
		waitJS(runs+`.length === 1`),
	); err != nil {
		t.Fatalf("a key's runs: %v\nthe page: %s", err, textOf(ctx, t, "main"))
	}
}
