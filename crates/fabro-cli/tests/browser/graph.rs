//! Issue 19, the live graph's pan and zoom: the wheel zooms, dragging pans, the zoom
//! buttons work from the keyboard alone, and "fit" brings the whole graph back.

use fabro_test_support::TestEnv;
use fantoccini::actions::{
    InputSource, MouseActions, PointerAction, WheelAction, WheelActions, MOUSE_BUTTON_LEFT,
};
use fantoccini::key::Key;
use fantoccini::Locator;
use serde_json::Value;

use crate::support::{cli_run, git_init, sign_in, Browser, Server};

const SMALL: &str = r#"digraph small {
  goal="Look around"
  start [shape=Mdiamond]
  plan [shape=parallelogram, script="true"]
  build [shape=parallelogram, script="true"]
  check [shape=parallelogram, script="true"]
  exit [shape=Msquare]
  start -> plan -> build -> check -> exit
}
"#;

/// The graph's view box as `[x, y, width, height]`.
async fn view_box(browser: &Browser) -> [f64; 4] {
    let value = browser
        .eval("var b = document.querySelector('#graph svg').viewBox.baseVal; return [b.x, b.y, b.width, b.height];")
        .await;
    let number = |index: usize| value[index].as_f64().unwrap_or(f64::NAN);
    [number(0), number(1), number(2), number(3)]
}

/// The graph's centre on the screen, in viewport pixels.
async fn graph_centre(browser: &Browser) -> (i64, i64) {
    let value: Value = browser
        .eval("var r = document.getElementById('graph').getBoundingClientRect(); return [Math.round(r.left + r.width / 2), Math.round(r.top + r.height / 2)];")
        .await;
    (
        value[0].as_i64().unwrap_or(0),
        value[1].as_i64().unwrap_or(0),
    )
}

async fn press_enter_on(browser: &Browser, css: &str) {
    browser
        .eval(&format!(
            "document.querySelector('{css}').focus(); return true;"
        ))
        .await;
    let focused = browser
        .client
        .active_element()
        .await
        .expect("an element has the focus");
    focused
        .send_keys(&Key::Enter.to_string())
        .await
        .expect("Enter is pressed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_graph_zooms_with_the_wheel_and_the_keyboard_and_pans_by_dragging() {
    let test = "the_graph_zooms_with_the_wheel_and_the_keyboard_and_pans_by_dragging";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let env = TestEnv::new("ui-graph");
    env.write("small.fabro", SMALL);
    git_init(&env);
    let server = Server::start(&env);
    sign_in(&browser, &server).await;
    let mut child = cli_run(&env, &server, &["small.fabro"], &[]);
    assert!(child.wait().expect("fabro run ends").success());
    let list = server.api("/api/v1/runs");
    let run_id = list["runs"][0]["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    browser.goto(&server.url(&format!("/runs/{run_id}"))).await;
    browser
        .wait_js(
            "the graph is shown",
            "return !!document.querySelector('#graph svg') && document.body.dataset.status === 'success';",
        )
        .await;
    let home = view_box(&browser).await;
    assert!(home[2] > 0.0 && home[3] > 0.0, "{home:?}");

    // The wheel zooms in (up) and out (down) around the centre.
    let (x, y) = graph_centre(&browser).await;
    let mut wheel = WheelActions::new("wheel".to_owned());
    wheel.push(WheelAction::Scroll {
        duration: None,
        x,
        y,
        delta_x: 0,
        delta_y: -120,
    });
    browser
        .client
        .perform_actions(wheel)
        .await
        .expect("the wheel turns");
    let zoomed = view_box(&browser).await;
    assert!(
        zoomed[2] < home[2] && zoomed[3] < home[3],
        "{home:?} -> {zoomed:?}"
    );
    let centre = |b: [f64; 4]| (b[0] + b[2] / 2.0, b[1] + b[3] / 2.0);
    let (cx, cy) = centre(zoomed);
    let (hx, hy) = centre(home);
    assert!(
        (cx - hx).abs() < 0.5 && (cy - hy).abs() < 0.5,
        "{home:?} -> {zoomed:?}"
    );

    // Dragging pans the view the way the pointer moves.
    let mouse = MouseActions::new("mouse".to_owned())
        .then(PointerAction::MoveTo {
            duration: None,
            x: x as f64,
            y: y as f64,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::MoveBy {
            duration: None,
            x: 40.0,
            y: 20.0,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    browser
        .client
        .perform_actions(mouse)
        .await
        .expect("the pointer drags");
    let panned = view_box(&browser).await;
    assert!(
        panned[0] < zoomed[0] && panned[1] < zoomed[1],
        "{zoomed:?} -> {panned:?}"
    );
    assert_eq!((panned[2], panned[3]), (zoomed[2], zoomed[3]));
    // The drag was not a click: still on the run page.
    assert_eq!(
        browser.eval("return document.body.dataset.page;").await,
        "run"
    );

    // The buttons, from the keyboard: zoom out twice, then fit.
    press_enter_on(&browser, "[data-zoom=out]").await;
    press_enter_on(&browser, "[data-zoom=out]").await;
    let out = view_box(&browser).await;
    assert!(out[2] > panned[2] * 1.5, "{panned:?} -> {out:?}");
    press_enter_on(&browser, "[data-zoom=reset]").await;
    assert_eq!(view_box(&browser).await, home);
    assert!(browser
        .client
        .find(Locator::Css("[data-zoom=in]"))
        .await
        .is_ok());
    browser.close().await;
}
